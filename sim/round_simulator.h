// The simulator of local-step training (docs/design.md §1, "Local steps, the outer optimizer,
// compression"): n virtual nodes in one process running gossipd's round algorithms —
// local-step gossip (algorithms/local_gossip.h) for D-PSGD, DiLoCo (algorithms/diloco.h) for
// C-PSGD — with the same step, the same round arithmetic (sgd/round.h, sgd/choco.h,
// sgd/ring_allreduce.h) and the same order of operations per node, so that a gossipd run and a
// simulation of the same config agree node by node, bit for bit (tests/daemon exactness tests).
//
// Per round r (iterations [rH, min(rH + H, T)), W(r)):
//   D-PSGD: every node takes its inner steps to y_i; its message fl(a_i − Δ_i) (for CHOCO, each
//     edge's compressed difference against its copy) goes out; every edge of W(r) takes its
//     message into its copy (one copy per directed edge: gossipd's two ends hold the same bits);
//     then every node forms z_i and takes its outer step; x_i ← a_i — or, with overlap, the
//     messages are combined one round later and the next round starts at the message.
//   C-PSGD: every node takes its inner steps from the common start; the ring mean of every node's
//     error-feedback input (ring_allreduce_mean_reference) is applied by the outer step, now or
//     one round late (overlap), exactly as each gossipd node applies it.
// No faults are simulated. Evaluation points are those of the Simulator (sim/simulator.h) at the
// same iterations. Nodes are stepped by several threads (RunConfig::threads) in contiguous
// ranges; every result is the same for every thread count.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sgd/problem.h"
#include "sgd/round.h"
#include "sim/simulator.h"
#include "topology/topology.h"

namespace gossip::sim {

class RoundSimulator {
 public:
  // `config.round` says the rounds; `topology` is needed for D-PSGD. Both borrowed.
  static Result<std::unique_ptr<RoundSimulator>> create(const sgd::Problem& problem,
                                                        const topology::Topology* topology,
                                                        RunConfig config);
  Result<RunTrace> run(const ProgressFn& progress = {});
  // The node models after run(), d × n (column i is node i).
  StateMatrix params() const;
  // Bytes one node sends in one round (the mean over nodes of the whole run's bytes per round).
  double bytes_per_round() const;

 private:
  RoundSimulator() = default;
  struct Worker {
    std::unique_ptr<sgd::Backend> backend;
    std::unique_ptr<sgd::Model> model;
    std::vector<float> grad, u;
    sgd::Batch batch;
    double compute_s = 0;
    std::int64_t compute_steps = 0;
  };
  struct Node {
    std::vector<float> x, anchor, start, delta, momentum, residual, state;
    double batch_loss = 0;
    std::int64_t batch_count = 0;
  };
  template <typename Fn>
  void for_nodes(const Fn& fn);
  // Node i's steps [t0, t1) from its x.
  void inner_steps(Worker& w, int i, std::int64_t t0, std::int64_t t1);
  void gossip_round(std::int64_t r, std::int64_t t0, std::int64_t t1, bool final_round);
  void post_messages(std::int64_t r);
  void combine_messages();
  void diloco_round(std::int64_t r, std::int64_t t0, std::int64_t t1, bool final_round);
  EvalPoint evaluate(std::int64_t iteration);

  const sgd::Problem* problem_ = nullptr;
  const topology::Topology* topology_ = nullptr;
  RunConfig config_;
  sgd::RoundConfig round_;
  int n_ = 0;
  std::size_t d_ = 0;
  std::unique_ptr<sgd::Optimizer> optimizer_;
  std::vector<sgd::BatchSampler> samplers_;
  std::vector<Worker> workers_;
  std::vector<Node> nodes_;
  std::map<std::pair<int, int>, std::vector<float>> copies_;  // CHOCO: ĉ_{j→i} by (j, i)
  // Gossip: the messages of the round in flight (every node's m_i; CHOCO: every edge's bytes).
  struct Sent {
    std::int64_t round = 0;
    std::vector<std::vector<float>> messages;
    std::map<std::pair<int, int>, std::vector<std::byte>> edges;
  } sent_;
  std::vector<std::vector<float>> pending_inputs_;  // DiLoCo overlap: the mean in flight
  bool pending_ = false;
  double bytes_sent_ = 0;
  std::int64_t rounds_ = 0;
  std::shared_ptr<const sgd::Dataset> eval_train_, eval_test_;
};

}  // namespace gossip::sim

// Replay of an asynchronous push-sum run (gossipd's PUSH_SUM with `staleness: τ`), bit for bit,
// from the nodes' logs (sim/push_sum_log.h): `gossip-sim run --config TRAIN --replay-push-sum DIR`.
//
// Push-sum (Kempe et al. 2003; Stochastic Gradient Push, Assran et al. ICML 2019, whose
// asynchronous variant is this one; docs/design.md §1 "Push-sum" for the synchronous recursion)
// conserves mass whenever every message is mixed exactly once, whenever it arrives, with the
// weight p_ij(s) its sender gave it: so each node may run on its own clock. Node i keeps z_i (its
// de-biased parameters) and w_i (float32), z_i^0 = x_0, w_i^0 = 1. Its iteration t:
//  1. it sends (z_i^t, w_i^t) to each out-neighbour at t;
//  2. it mixes L_t, the messages of its log's line t ((j, s): node j's state at the start of its
//     iteration s), sorted by (j, s); the row is those entries with weight p_ij(s) (the entry of j
//     in topology::push_sum_row(topology, i, s)) and node i's own (i, p_ii(t)) inserted before the
//     first entry with j > i; the weights w_i^t and w_j^s in the same order;
//     mix = topology::push_sum_mix(i, row, weights);
//  3. gradient and direction u at z_i^t, γ_t: node i's local step of its iteration t;
//  4. z_i^{t+1} = Backend::mix over the row's terms in order, weights float(c) (mix.self for the
//     own entry, mix.neighbours[k] for the others), x = z_i^t or z_j^s, gamma = γ_t (the step on
//     the de-biased parameters, not scaled by the weight), update u — the fused chain
//     acc = w_0·x_0, acc = fma(w_k, x_k, acc), out = fma(−gamma, u, acc); w_i^{t+1} = mix.weight.
// Node i runs E_i ≤ T iterations (its log's lines; it ends early when alone, sim/push_sum_log.h).
// An entry "j:se" is an empty message, node j's last to i, sent as j ended: taken but not mixed.
// After iteration E_i − 1 node i drains L_end the same way with the own entry (i, 1), gamma 0 and
// no update (no mix at all when L_end has no message with mass). Every message is mixed once, so
// Σ_i w_i^final = n up to float rounding, and without steps Σ_i w_i z_i is kept: the de-biased z_i
// tend to the exact average of the starts.
//
// With every L_t = {(j, t) : j sends to i at t} and L_end empty, this is the synchronous push-sum
// of sim/simulator.h to the bit (the same row, weights and rounding).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sgd/backend.h"
#include "sim/experiment.h"
#include "sim/node_state.h"
#include "sim/push_sum_log.h"
#include "sim/simulator.h"
#include "topology/topology.h"

namespace gossip::sim {

// Node i's local step of its iteration t at z_i^t: the direction u (as many floats as z, valid
// until the next call) and γ_t. Called for each node's iterations in order 0, 1, ..., each once.
struct LocalStep {
  const float* u = nullptr;
  float gamma = 0;
};
using LocalStepFn = std::function<LocalStep(int node, std::int64_t iteration, const float* z)>;

struct PushSumReplayed {
  StateMatrix params;          // z_i^final in column i (start's rows)
  std::vector<float> weights;  // w_i^final
};

// Replays `logs` (read_push_sum_logs against `topology`) from z_i^0 = start.col(i) (any rows;
// as `step` expects z), in the logs' causal order, keeping each state
// until its last reader is done. Mixes on `backend`. FailedPrecondition naming the file and line
// when a node's final weight differs from its log's weight line: the replay does not reproduce
// that run (another config, topology or build).
Result<PushSumReplayed> replay_push_sum(const PushSumLogs& logs, const topology::Topology& topology,
                                        const StateMatrix& start, sgd::Backend& backend,
                                        const LocalStepFn& step, const ProgressFn& progress = {});

// The replay `gossip-sim run --replay-push-sum` runs: the problem, the topology (config.topologies
// holds one) and the simulator's push-sum nodes of `config` (config.push_sum), whose local steps
// the replay takes (Simulator::replay_direction), x_0 = the problem's initial parameters.
class PushSumReplay {
 public:
  // Errors as a push-sum run's of the same config (a topology that cannot be built, ...).
  static Result<std::unique_ptr<PushSumReplay>> create(const ExperimentConfig& config);

  const topology::Topology& topology() const { return topology_; }
  std::int64_t iterations() const { return simulator_->config().iterations; }
  // Reads the logs under `dir` (read_push_sum_logs), then replays them; params() has d rows, as
  // Simulator::params(). The two kinds of error apart: Status of read_logs() is the input's fault.
  Result<PushSumLogs> read_logs(const std::string& dir, Env& env = Env::system()) const;
  Result<PushSumReplayed> run(const PushSumLogs& logs, const ProgressFn& progress = {});

 private:
  PushSumReplay() = default;
  sgd::Problem problem_;
  topology::Topology topology_;
  std::unique_ptr<Simulator> simulator_;
};

}  // namespace gossip::sim

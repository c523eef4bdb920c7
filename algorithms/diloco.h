// DiLoCo (Douillard et al. 2023, arXiv 2311.08105): ALLREDUCE with H local steps per round and
// an outer optimizer on the mean pseudo-gradient, its messages compressed with error feedback
// (INTELLECT-1, arXiv 2412.01152), optionally applied one round late so the exchange runs during
// the next round's inner steps (Streaming DiLoCo, arXiv 2501.18512) — an algorithm of the node
// driver (daemon/algorithm.h) over a Gloo context.
//
// Round r covers iterations [rH, rH + H) (the last may be shorter). Every node holds the same
// anchor a. Inner steps: the local step's gradient and direction, x ← x − γ_t u_t. At the round's
// last iteration, after its inner step, y is x and Δ = fl(s − y) with s the round's start, and
// (sgd/round.h):
//   without overlap: D = the ring mean (algorithms/gloo_ring.h) of D(C(Δ + e)), e the error
//     feedback residual; outer_step(a, D, m); x ← a (s = a);
//   with overlap: the mean of round r−1, in flight during this round, is waited for and applied,
//     outer_step(a, D_{r−1}, m); round r's mean starts in the background; the next round starts
//     at s = fl(a − Δ_r), the anchor plus this round's progress, which round r's mean accounts for
//     one round later. The last round's mean is waited for and applied at the end, so every node
//     finishes at the same a.
// An attached trainer takes its own H steps between POSTs (docs/attach.md): each iteration of the
// driver is then a whole round and y is what it posted; its first round averages the first posts,
// so that the nodes share an anchor.
//
// A failed or timed-out mean abandons the round's last iteration: x and the local step's optimizer
// state are put back as they were before its inner step, and the driver checkpoints them
// (kExitNeighbourFailed). State in a checkpoint: a, m, e, the round's start, and a mean in flight
// (its input), so a job resumed from a checkpoint continues bit for bit.
#pragma once

#include <gloo/context.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "algorithms/allreduce.h"
#include "algorithms/gloo_ring.h"
#include "algorithms/round_algorithm.h"

namespace gossip::algorithms {

class Diloco final : public RoundAlgorithm {
 public:
  // Node `node`; `context` connected, `store` its rendezvous store (borrowed for the run). For a
  // model of `num_params` floats; `attached`: the local step is an external trainer.
  Diloco(int node, const config::TrainConfig& config, std::shared_ptr<gloo::Context> context,
         TransportStore& store, std::size_t num_params, bool attached);
  ~Diloco() override;

  // Floats of state a checkpoint holds (round_algorithm.h; its own vectors: the error-feedback
  // residual, with compression, then, with overlap, the input of the mean in flight).
  static std::size_t state_floats(const sgd::RoundConfig& round, std::size_t num_params);

  std::string_view name() const override { return "diloco"; }
  daemon::IterationOutcome iterate(std::uint64_t t, daemon::LocalStep& step,
                                   daemon::ParameterBuffers& buffers) override;

 private:
  Result<std::uint64_t> start_rounds(std::uint64_t start, bool rejoining, int* exit_code) override;
  bool exchange_in_flight() const override { return pending_ || resend_in_flight_; }
  // Round r's mean of `input`: at once, or started in the background (overlap).
  Status mean_now(std::uint64_t r, std::span<const float> input, std::span<float> out);
  void start_mean(std::uint64_t r);
  Status finish_mean();
  daemon::IterationOutcome first_attached_round(std::uint64_t r, daemon::ParameterBuffers& buffers,
                                                std::int64_t t0);
  // The end of round r with y: Δ, the mean(s), the outer step; the next start in start_.
  Status end_round(std::uint64_t r, std::span<const float> y, bool final_round);

  TransportStore& store_;
  const int num_nodes_;
  GlooRing ring_;

  std::vector<float> residual_, delta_, input_, mean_;
  std::vector<std::byte> bytes_;
  // Overlap: the mean in flight (its round and input), and its worker.
  std::optional<std::uint64_t> pending_;
  std::vector<float> pending_input_;
  std::thread worker_;
  Status worker_status_;
};

}  // namespace gossip::algorithms

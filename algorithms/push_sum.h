// PUSH_SUM: Stochastic Gradient Push (Assran et al., ICML 2019, arXiv 1811.10792) — push-sum
// gossip (Kempe et al., FOCS 2003; Nedić & Olshevsky, IEEE TAC 2016) with a local SGD step — as
// an algorithm of the node driver (daemon/algorithm.h). Mixing is column-stochastic (each node
// splits what it has over its out-neighbours and itself, topology/push_sum.h), so directed,
// non-regular and time-varying topologies need no doubly-stochastic W.
//
// State: the driver's buffers hold the de-biased parameters z_i = x_i / w_i — what the node
// evaluates, checkpoints and writes as its final parameters — and this object the push-sum weight
// w_i (w_0 = 1; the one float of state() a checkpoint holds beside z, so a resume is exact).
// Iteration t at node i (combine-then-adapt, as Dpsgd):
//   1. post the exchange: send (z_i^t, w_i^t) — the parameters and one float — to N_out(i, t),
//      receive (z_j^t, w_j^t) from N_in(i, t);
//   2. meanwhile: the local step's gradient at z_i^t;
//   3. wait for the neighbours (deadline: timeouts.deadline_ms; a missing one fails stop);
//   4. u_t ← the step's direction at z_i^t, then w_i^{t+1} = Σ_j p_ij w_j^t and
//      z_i^{t+1} = Σ_j c_ij z_j^t − (γ_t / w_i^{t+1}) u_t with c_ij = p_ij w_j^t / w_i^{t+1}, in
//      one fused pass of ParameterBuffers::mix (terms in increasing j, as gossip-sim's push_sum).
// In numerator form that is x_i^{t+1} = Σ_j p_ij x_j^t − γ_t u_t: the sum of the x_i and of the
// w_i over the nodes is what the gradients leave of it (docs/design.md §1, "Push-sum").
//
// Faults: fail-stop only (the config refuses fault.policy CARRY_ON for PUSH_SUM).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/neighbourhood.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
#include "topology/topology.h"

namespace gossip::algorithms {

// Loads a checkpoint's push-sum weight (the one float of PushSum's and AsyncPushSum's state)
// into `weight`: InvalidArgument unless it is one finite value > 0.
Status load_push_sum_weight(std::span<const float> state, float& weight);

class PushSum final : public daemon::Algorithm {
 public:
  // Node `node` of `topology` under `config`, over `exchange` (all borrowed for the run).
  PushSum(int node, const config::TrainConfig& config, const topology::Topology& topology,
          daemon::ParameterExchange& exchange);

  // A message: the parameters, then the weight.
  static std::uint64_t message_floats(std::uint64_t num_params) { return num_params + 1; }

  std::string_view name() const override { return "push_sum"; }
  // The checkpoint's algorithm state: w_i.
  static constexpr std::size_t kStateFloats = 1;
  std::size_t state_size() const override { return kStateFloats; }
  std::vector<float> state() const override { return {weight_}; }
  // InvalidArgument unless the one float is a finite weight > 0.
  Status load_state(std::span<const float> state) override;
  std::size_t received_floats(std::size_t num_params) const override {
    return message_floats(num_params);
  }
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              daemon::RunServices& services, int* exit_code) override;
  daemon::IterationOutcome iterate(std::uint64_t t, daemon::LocalStep& step,
                                   daemon::ParameterBuffers& buffers) override;
  void observe(daemon::MetricsSnapshot& snapshot) const override { neighbours_.observe(snapshot); }

  float weight() const { return weight_; }

 private:
  const int self_;
  const config::TrainConfig& cfg_;
  const topology::Topology& topology_;
  Neighbourhood neighbours_;
  daemon::RunServices* services_ = nullptr;
  float weight_ = 1.0f;         // w_i^t
  std::vector<float> message_;  // (z_i^t, w_i^t) as sent
  std::vector<daemon::Inbox> from_;
};

}  // namespace gossip::algorithms

// PUSH_SUM (see push_sum.h). The order of the pieces is Dpsgd's, for the same reasons: the step's
// direction (which advances the optimizer state) runs only once the neighbours' messages are in,
// so an abandoned iteration leaves z_t, w_t and the optimizer state as they were and the driver's
// checkpoint is exact; the gradient at z_t is computed while the messages travel.
#include "algorithms/push_sum.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/divergence.h"
#include "topology/push_sum.h"

namespace gossip::algorithms {

using daemon::IterationEnd;
using daemon::IterationStats;

PushSum::PushSum(int node, const config::TrainConfig& config, const topology::Topology& topology,
                 daemon::ParameterExchange& exchange)
    : self_(node),
      cfg_(config),
      topology_(topology),
      neighbours_(node, config, topology, exchange) {}

Status load_push_sum_weight(std::span<const float> state, float& weight) {
  if (state.size() != 1 || !std::isfinite(state[0]) || state[0] <= 0.0f) {
    return invalid_argument(
        "the checkpoint's push-sum weight is missing or not a finite value > 0");
  }
  weight = state[0];
  return Status::ok();
}

Status PushSum::load_state(std::span<const float> state) {
  return load_push_sum_weight(state, weight_);
}

Result<std::uint64_t> PushSum::start(std::uint64_t start, bool /*rejoining*/,
                                     std::uint64_t /*total*/, daemon::RunServices& services,
                                     int* /*exit_code*/) {
  services_ = &services;
  neighbours_.start(services);
  neighbours_.reset_byte_counts();
  return start;
}

daemon::IterationOutcome PushSum::iterate(std::uint64_t t, daemon::LocalStep& step,
                                          daemon::ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const bool overlap = !cfg_.no_overlap();
  const auto time = static_cast<std::int64_t>(t);
  neighbours_.plan(t, time);
  from_.clear();
  for (const topology::Neighbor& nb : neighbours_.in()) {
    from_.push_back({nb.node, buffers.message(nb.node)});
  }
  const std::span<const float> z = buffers.outgoing();
  message_.assign(z.begin(), z.end());
  message_.push_back(weight_);
  const std::int64_t t0 = clock.monotonic_ns();
  if (overlap) neighbours_.post(t, message_, from_);
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  const std::int64_t t1 = clock.monotonic_ns();
  if (!overlap) neighbours_.post(t, message_, from_);
  const std::optional<IterationEnd> end = neighbours_.wait(t, [&](int peer) {
    const std::span<const float> m = buffers.message(peer);
    if (!all_finite(m)) {
      return "its iteration-" + std::to_string(t) + " message contains NaN or Inf";
    }
    return m.back() > 0.0f ? std::string()
                           : "its iteration-" + std::to_string(t) + " push-sum weight is not > 0";
  });
  if (end) return *end;
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  // Row i of P(t) and each term's weight: ours, or the last float of the neighbour's message.
  const std::vector<std::pair<int, double>> row = topology::push_sum_row(topology_, self_, time);
  std::vector<float> weights;
  for (const auto& [j, p] : row) {
    weights.push_back(j == self_ ? weight_ : buffers.message(j).back());
    if (j != self_) buffers.upload(j);
  }
  const topology::PushSumMix mix = topology::push_sum_mix(self_, row, weights);
  daemon::RowWeights w;
  w.self = mix.self;
  w.neighbours = mix.neighbours;
  IterationStats stats;
  stats.lr = step.direction(buffers.x(), buffers.update(), t);
  buffers.mix(self_, w, mix.scaled_gamma(stats.lr), step.has_update());
  weight_ = mix.weight;
  stats.mix_s = static_cast<double>(clock.monotonic_ns() - t2) * 1e-9;
  neighbours_.finish_stats(stats, t0, t1, t2, clock.monotonic_ns(), overlap);
  return daemon::IterationReport{loss, stats};
}

}  // namespace gossip::algorithms

// D-PSGD (see dpsgd.h). Why the pieces are arranged as they are:
//  - the step's direction (which advances the optimizer state) is computed only after the
//    neighbours' data arrived, so an abandoned iteration leaves the momentum buffer untouched and
//    the driver's checkpoint is exactly the state at the start of the iteration;
//  - the exchange's deadlines run on real time (the transport waits on condition variables);
//    everything this algorithm measures comes from the injected clock.
#include "algorithms/dpsgd.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "common/divergence.h"
#include "common/log.h"
#include "daemon/exit_codes.h"
#include "sgd/mean.h"

namespace gossip::algorithms {
namespace {

std::string not_finite(std::uint64_t t) {
  return "its iteration-" + std::to_string(t) + " parameters contain NaN or Inf";
}

}  // namespace

using daemon::IterationEnd;
using daemon::IterationStats;
using daemon::NeighbourFailure;

using daemon::IterationEnd;
using daemon::IterationStats;

Dpsgd::Dpsgd(int node, const config::TrainConfig& config, const topology::Topology& topology,
             daemon::ParameterExchange& exchange)
    : self_(node), cfg_(config), neighbours_(node, config, topology, exchange) {}

Result<std::uint64_t> Dpsgd::start(std::uint64_t start, bool rejoining, std::uint64_t total,
                                   RunServices& services, int* /*exit_code*/) {
  services_ = &services;
  neighbours_.start(services);
  neighbours_.reset_byte_counts();
  if (rejoining) return neighbours_.rejoin(start, total);
  if (neighbours_.joins(rejoining)) return neighbours_.join(total);
  return start;
}

IterationOutcome Dpsgd::iterate(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const bool overlap = !cfg_.no_overlap();
  neighbours_.plan(t, static_cast<std::int64_t>(t));
  from_.clear();
  for (const topology::Neighbor& nb : neighbours_.in()) {
    from_.push_back({nb.node, buffers.inbox(nb.node)});
  }
  rejoin_average(t, buffers);
  // x_t goes out while the gradient at x_t is computed (after it, with no_overlap).
  const std::int64_t t0 = clock.monotonic_ns();
  if (overlap) neighbours_.post(t, buffers.outgoing(), from_);
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  const std::int64_t t1 = clock.monotonic_ns();
  if (!overlap) neighbours_.post(t, buffers.outgoing(), from_);
  const std::optional<IterationEnd> end = neighbours_.wait(
      t, [&](int peer) { return all_finite(buffers.inbox(peer)) ? std::string() : not_finite(t); });
  if (end) return *end;
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  if (services_->live_metrics) estimate_consensus(t, buffers);
  IterationStats stats = mix(t, step, buffers, {});
  neighbours_.finish_stats(stats, t0, t1, t2, clock.monotonic_ns(), overlap);
  return daemon::IterationReport{loss, stats};
}

// The rejoin iteration (t_a, or the first later one with a neighbour if none delivered at t_a —
// an agreement the proposer withdrew too late): first the neighbours' x_j^t, then x_t := their
// average is what is sent.
void Dpsgd::rejoin_average(std::uint64_t t, ParameterBuffers& buffers) {
  if (!neighbours_.rejoin_due(t) || from_.empty()) return;
  std::map<int, std::string> failed = neighbours_.receive(t, from_);
  std::vector<const float*> usable;
  for (const daemon::Inbox& in_box : from_) {
    if (failed.count(in_box.peer) || !all_finite(in_box.buffer)) continue;
    usable.push_back(in_box.buffer.data());
  }
  const std::size_t count = usable.size();
  if (count > 0) {
    std::vector<float> avg(buffers.num_params());
    sgd::mean_rounded_once(usable, avg.size(), avg.data());
    buffers.set_x(avg);
    GOSSIP_LOG(kInfo) << neighbours_.rejoin_event() << " at iteration " << t << ": x := average of "
                      << count << " neighbours";
    services_->metrics.event(
        t, neighbours_.rejoin_event(),
        "x := average of " + std::to_string(count) + " neighbours' parameters");
    neighbours_.rejoined();
  }
  from_.clear();  // received already
}

// Kong et al. (ICML 2021) show that the consensus distance Ξ_t² = (1/n) Σ_i ||x̄_t − x_i^t||²
// decides whether decentralized training keeps up with centralized training. A node sees only its
// neighbours, so it reports ||x_i^t − mean_{j used at t} x_j^t||², from the vectors it is about to
// mix (x_t as sent, the received x_j^t), at most once per kConsensusEveryNs.
void Dpsgd::estimate_consensus(std::uint64_t t, ParameterBuffers& buffers) {
  const std::int64_t now = services_->clock.monotonic_ns();
  if (consensus_at_ns_ && now - *consensus_at_ns_ < kConsensusEveryNs) return;
  consensus_at_ns_ = now;
  std::vector<std::span<const float>> others;
  for (const auto& [j, dj] : neighbours_.used()) others.push_back(buffers.inbox(j));
  if (others.empty()) return;  // alone at t: nothing to compare with; the last value stays
  consensus_sq_ = distance_to_mean_sq(buffers.outgoing(), others, kConsensusCoords);
  consensus_iteration_ = t;
}

void Dpsgd::observe(daemon::MetricsSnapshot& snapshot) const {
  neighbours_.observe(snapshot);
  snapshot.consensus_distance_sq = consensus_sq_;
  snapshot.consensus_iteration = consensus_iteration_;
}

// u_t, then x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t with the row of W(t) for the neighbours used
// (logged when it changed). Returns `stats` with the learning rate and the mix time.
IterationStats Dpsgd::mix(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers,
                          IterationStats stats) {
  for (const auto& [j, dj] : neighbours_.used()) buffers.upload(j);
  const daemon::RowWeights w = neighbours_.weights(t, static_cast<std::int64_t>(t));
  Clock& clock = services_->clock;
  const std::int64_t t3 = clock.monotonic_ns();
  stats.lr = step.direction(buffers.x(), buffers.update(), t);
  buffers.mix(self_, w, stats.lr, step.has_update());
  stats.mix_s = static_cast<double>(clock.monotonic_ns() - t3) * 1e-9;
  return stats;
}

}  // namespace gossip::algorithms

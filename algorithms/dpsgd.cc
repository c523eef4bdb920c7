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

namespace gossip::algorithms {

using daemon::IterationEnd;
using daemon::IterationStats;
using daemon::NeighbourFailure;

namespace {

// Whether neighbour `peer` has announced an iteration before t (it is alive and behind).
std::function<bool(int)> behind_of(const daemon::ParameterExchange& exchange, std::uint64_t t) {
  return [&exchange, t](int peer) {
    std::optional<std::uint64_t> at = exchange.peer_iteration(peer);
    return at && *at < t;
  };
}

std::string not_finite(std::uint64_t t) {
  return "its iteration-" + std::to_string(t) + " parameters contain NaN or Inf";
}

IterationEnd abandon(int code, const std::string& why) {
  return {IterationEnd::Kind::kAbandon, code, aborted(why)};
}

}  // namespace

Dpsgd::Dpsgd(int node, const config::TrainConfig& config, const topology::Topology& topology,
             daemon::ParameterExchange& exchange)
    : self_(node),
      cfg_(config),
      topology_(topology),
      exchange_(exchange),
      deadline_(std::chrono::milliseconds(config.timeouts().deadline_ms())),
      carry_on_(carry_on_policy()),
      everyone_(daemon::all_neighbours(topology, node)),
      peers_(exchange),
      mh_(carry_on_ && daemon::uses_metropolis_hastings(topology, node)) {}

std::vector<int> Dpsgd::senders(const topology::Topology& topology, int node) {
  std::vector<int> senders;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.in_neighbors(node, t)) senders.push_back(nb.node);
  }
  return senders;
}

bool Dpsgd::carry_on_policy() const {
  // Carry-on needs a symmetric W(t); Metropolis–Hastings rows are recomputed from the degrees both
  // ends announce, other schemes move a dropped edge's weight onto the diagonal.
  if (cfg_.fault().policy() == config::pb::Fault::FAIL_STOP) return false;
  if (daemon::mixing_is_symmetric(topology_)) return true;
  GOSSIP_LOG(kWarning) << "fault.policy CARRY_ON needs a symmetric W(t) (an undirected topology); "
                       << (topology_.name().empty() ? std::string("this topology")
                                                    : topology_.name())
                       << " is directed, so this node fails stop (checkpoint, exit "
                       << daemon::kExitNeighbourFailed << ") when a neighbour fails";
  return false;
}

Result<std::uint64_t> Dpsgd::start(std::uint64_t start, bool rejoining, std::uint64_t total,
                                   RunServices& services, int* /*exit_code*/) {
  services_ = &services;
  membership_ = std::make_unique<daemon::Membership>(
      daemon::Membership::Options{
          self_, everyone_, cfg_.fault().admit_margin(),
          std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count()},
      peers_, services.clock);
  sent_before_ = exchange_.bytes_sent();
  received_before_ = exchange_.bytes_received();
  if (carry_on_ && rejoining) return rejoin(start, total);
  return start;
}

IterationOutcome Dpsgd::iterate(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const bool overlap = !cfg_.no_overlap();
  plan(t, buffers);
  rejoin_average(t, buffers);
  // x_t goes out while the gradient at x_t is computed (after it, with no_overlap).
  const std::int64_t t0 = clock.monotonic_ns();
  if (overlap) post_exchange(t, buffers);
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  const std::int64_t t1 = clock.monotonic_ns();
  if (!overlap) post_exchange(t, buffers);
  if (std::optional<IterationEnd> end = gossip(t, buffers)) return *end;
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  IterationStats stats = mix(t, step, buffers, {});
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  stats.wait_s = static_cast<double>(t2 - t1) * 1e-9;
  stats.exchange_s = static_cast<double>(t2 - (overlap ? t0 : t1)) * 1e-9;
  stats.iteration_s = static_cast<double>(clock.monotonic_ns() - t0) * 1e-9;
  stats.bytes_sent = exchange_.bytes_sent() - sent_before_;
  stats.bytes_received = exchange_.bytes_received() - received_before_;
  sent_before_ += stats.bytes_sent;
  received_before_ += stats.bytes_received;
  return daemon::IterationReport{loss, stats};
}

// Carries out Membership's decisions at iteration t.
void Dpsgd::carry_out(const daemon::MembershipActions& a, std::uint64_t t) {
  daemon::MetricsWriter& metrics = services_->metrics;
  for (const auto& [to_peer, message] : a.send) exchange_.send_admission(to_peer, message);
  for (int j : a.admitted) {
    exchange_.skip_before(j, t);  // nothing it sent before the gap may fill a receive
    GOSSIP_LOG(kInfo) << "edge to node " << j << " re-admitted from iteration " << t;
    metrics.event(t, "edge_admitted",
                  "node " + std::to_string(j) + " from iteration " + std::to_string(t), j);
  }
  for (const auto& [j, reason] : a.dropped) {
    GOSSIP_LOG(kWarning) << "dropping the edge to node " << j << " from iteration " << t << ": "
                         << reason;
    metrics.event(t, "edge_dropped", "node " + std::to_string(j) + ": " + reason, j);
  }
}

// Iteration t's neighbours (dropped edges left out) and the exchange set up for them.
void Dpsgd::plan(std::uint64_t t, ParameterBuffers& buffers) {
  if (carry_on_) carry_out(membership_->start_iteration(t, exchange_.take_admissions()), t);
  const auto it = static_cast<std::int64_t>(t);
  in_ = topology_.in_neighbors(self_, it);
  std::vector<topology::Neighbor> out = topology_.out_neighbors(self_, it);
  if (carry_on_) {
    auto is_dropped = [&](const topology::Neighbor& nb) {
      return membership_->is_dropped(nb.node);
    };
    std::erase_if(in_, is_dropped);
    std::erase_if(out, is_dropped);
  }
  planned_ = static_cast<std::uint32_t>(in_.size());  // d_i(t)
  exchange_.set_iteration(t, planned_);
  to_.clear();
  for (const topology::Neighbor& nb : out) to_.push_back(nb.node);
  from_.clear();
  for (const topology::Neighbor& nb : in_) from_.push_back({nb.node, buffers.inbox(nb.node)});
  unusable_.clear();
}

void Dpsgd::post_exchange(std::uint64_t t, ParameterBuffers& buffers) {
  pending_ = exchange_.begin(t, buffers.outgoing(), to_, from_);
}

// A restarted node (resumed from a checkpoint while its neighbours are ahead) rejoins at an
// agreed t_a (membership.h); returns the iteration to go on from.
std::uint64_t Dpsgd::rejoin(std::uint64_t start, std::uint64_t total) {
  std::optional<std::uint64_t> ahead = membership_->begin_rejoin(start);
  if (!ahead) return start;
  Clock& clock = services_->clock;
  daemon::MembershipActions actions;
  for (int round = 0; round < 5 && !interrupted(); ++round) {
    carry_out(membership_->propose_rejoin(start), start);
    // Answers (and crossing proposals) arrive within the deadline.
    const std::int64_t until_ns =
        clock.monotonic_ns() +
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count();
    while (membership_->awaiting_answers() && clock.monotonic_ns() < until_ns && !interrupted()) {
      clock.sleep_for_ns(2'000'000);
      carry_out(membership_->receive(exchange_.take_admissions(), start), start);
    }
    actions = {};
    const bool agreed = membership_->end_rejoin_round(round, start, actions);
    carry_out(actions, start);
    if (agreed) break;
  }
  actions = {};
  const std::uint64_t t_a = membership_->finish_rejoin(start, actions);
  carry_out(actions, start);
  GOSSIP_LOG(kInfo) << "rejoining: checkpoint at iteration " << start << ", neighbours at up to "
                    << *ahead << "; jumping to iteration " << t_a << " (" << membership_->agreed()
                    << " of " << everyone_.size() << " neighbours accepted)";
  if (t_a < total) rejoin_at_ = t_a;
  return t_a;
}

// The rejoin iteration (t_a, or the first later one with a neighbour if none delivered at t_a —
// an agreement the proposer withdrew too late): first the neighbours' x_j^t, then x_t := their
// average is what is sent.
void Dpsgd::rejoin_average(std::uint64_t t, ParameterBuffers& buffers) {
  if (!rejoin_at_ || t < *rejoin_at_ || from_.empty()) return;
  std::unique_ptr<daemon::PendingExchange> first =
      exchange_.begin(t, buffers.outgoing(), {}, from_);
  for (const NeighbourFailure& f : first->wait(
           after_deadline(), [this] { return interrupted(); }, behind_of(exchange_, t))) {
    unusable_.emplace(f.peer, f.status.to_string());
  }
  first.reset();
  const std::size_t d = buffers.num_params();
  std::vector<double> sum(d, 0.0);
  int count = 0;
  for (const daemon::Inbox& in_box : from_) {
    if (unusable_.count(in_box.peer)) continue;
    if (!all_finite(in_box.buffer)) {
      unusable_.emplace(in_box.peer, not_finite(t));
      continue;
    }
    for (std::size_t k = 0; k < d; ++k) sum[k] += in_box.buffer[k];
    ++count;
  }
  if (count > 0) {
    std::vector<float> avg(d);
    for (std::size_t k = 0; k < d; ++k) avg[k] = static_cast<float>(sum[k] / count);
    buffers.set_x(avg);
    GOSSIP_LOG(kInfo) << "rejoined at iteration " << t << ": x := average of " << count
                      << " neighbours";
    services_->metrics.event(
        t, "rejoined", "x := average of " + std::to_string(count) + " neighbours' parameters");
    rejoin_at_.reset();
  }
  from_.clear();  // received already
}

// Waits for the neighbours' x_j^t and decides which are mixed (used_). Under fail-stop a missing
// one ends the run; under carry-on both ends of an edge exchange verdicts and drop it together.
std::optional<IterationEnd> Dpsgd::gossip(std::uint64_t t, ParameterBuffers& buffers) {
  // A neighbour that is connected but still finishing iteration t-1 (held up by a failure
  // elsewhere) is waited for longer; under fail-stop only the deadline counts.
  std::vector<NeighbourFailure> failures = pending_->wait(
      after_deadline(), [this] { return interrupted(); },
      carry_on_ ? behind_of(exchange_, t) : std::function<bool(int)>());
  pending_.reset();
  for (const NeighbourFailure& f : failures) unusable_.emplace(f.peer, f.status.to_string());
  for (const topology::Neighbor& nb : in_) {
    if (!unusable_.count(nb.node) && !all_finite(buffers.inbox(nb.node))) {
      unusable_.emplace(nb.node, not_finite(t));
    }
  }
  if (!unusable_.empty() && interrupted()) {
    return abandon(daemon::kExitStopped, "stop requested (signal)");
  }
  used_.clear();
  if (!carry_on_) {
    if (!unusable_.empty()) {
      std::string why;
      for (const auto& [peer, reason] : unusable_) {
        GOSSIP_LOG(kError) << "neighbour " << peer << " failed at iteration " << t << ": "
                           << reason;
        why += (why.empty() ? "" : "; ") + std::string("neighbour ") + std::to_string(peer) + ": " +
               reason;
      }
      return abandon(daemon::kExitNeighbourFailed, why);
    }
    for (const topology::Neighbor& nb : in_) used_[nb.node] = 0;
    return std::nullopt;
  }
  // Verdict phase: the edge is used at t iff both ends have each other's x^t and both verdicts
  // arrived; otherwise both ends drop it from t on.
  std::vector<int> peers;
  for (const topology::Neighbor& nb : in_) {
    peers.push_back(nb.node);
    exchange_.send_verdict(nb.node, {t, unusable_.count(nb.node) == 0, planned_});
  }
  std::map<int, daemon::Verdict> verdicts;
  if (!peers.empty()) {
    verdicts =
        exchange_.wait_verdicts(t, peers, after_deadline(), [this] { return interrupted(); });
  }
  if (verdicts.size() < peers.size() && interrupted()) {
    return abandon(daemon::kExitStopped, "stop requested (signal)");
  }
  daemon::MembershipActions actions;
  used_ = membership_->decide(peers, unusable_, verdicts, actions);
  carry_out(actions, t);
  if (used_.size() < peers.size()) {
    GOSSIP_LOG(kWarning) << "active degree dropped to " << used_.size() << " at iteration " << t;
    if (membership_->partitioned()) {
      GOSSIP_LOG(kWarning) << "partitioned: no neighbours left at iteration " << t
                           << "; training alone";
      services_->metrics.event(t, "partitioned", "no neighbours left; training alone");
    }
  }
  return std::nullopt;
}

// u_t, then x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t with the row of W(t) for the neighbours used
// (logged when it changed). Returns `stats` with the learning rate and the mix time.
IterationStats Dpsgd::mix(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers,
                          IterationStats stats) {
  const auto it = static_cast<std::int64_t>(t);
  for (const auto& [j, dj] : used_) buffers.upload(j);
  const daemon::RowWeights w = daemon::row_weights(topology_, self_, it, mh_, planned_, used_);
  std::vector<std::pair<int, double>> row = w.row(self_);
  if (!row_logged_ || row != last_row_) {
    services_->metrics.weights(t, row);
    last_row_ = std::move(row);
    row_logged_ = true;
  }
  Clock& clock = services_->clock;
  const std::int64_t t3 = clock.monotonic_ns();
  stats.lr = step.direction(buffers.x(), buffers.update(), t);
  buffers.mix(self_, w, stats.lr, step.has_update());
  stats.mix_s = static_cast<double>(clock.monotonic_ns() - t3) * 1e-9;
  return stats;
}

}  // namespace gossip::algorithms

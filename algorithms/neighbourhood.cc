// Neighbourhood (see neighbourhood.h).
#include "algorithms/neighbourhood.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "daemon/exit_codes.h"
#include "daemon/node.h"

namespace gossip::algorithms {
namespace {

std::string describe(const daemon::Admission& a) {
  switch (a.kind) {
    case daemon::Admission::kAdmit:
      return "Admit{" + std::to_string(a.iteration) + ", current " + std::to_string(a.current) +
             "}";
    case daemon::Admission::kLeave:
      return "Leave{" + std::to_string(a.iteration) + "}";
    default:
      return std::string(a.accepted ? "Accept{" : "Refuse/withdraw{") +
             std::to_string(a.iteration) + ", current " + std::to_string(a.current) + "}";
  }
}

// The membership messages received since the last call (logged at debug level).
std::vector<daemon::Admission> take_admissions(daemon::ParameterExchange& exchange) {
  std::vector<daemon::Admission> taken = exchange.take_admissions();
  for (const daemon::Admission& a : taken) {
    GOSSIP_LOG(kDebug) << "membership: from node " << a.peer << " " << describe(a);
  }
  return taken;
}

// Whether neighbour `peer` has announced an exchange before t (it is alive and behind).
std::function<bool(int)> behind_of(const daemon::ParameterExchange& exchange, std::uint64_t t) {
  return [&exchange, t](int peer) {
    std::optional<std::uint64_t> at = exchange.peer_iteration(peer);
    return at && *at < t;
  };
}

daemon::IterationEnd abandon(int code, const std::string& why) {
  return {daemon::IterationEnd::Kind::kAbandon, code, aborted(why)};
}

// The nodes of `neighbours(t)` over the topology's period, ascending, each once.
template <typename Neighbours>
std::vector<int> over_period(const topology::Topology& topology, const Neighbours& neighbours) {
  std::vector<int> out;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : neighbours(t)) out.push_back(nb.node);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

double distance_to_mean_sq(std::span<const float> x, std::span<const std::span<const float>> others,
                           std::size_t max_coords) {
  const std::size_t d = x.size();
  if (d == 0 || others.empty()) return 0;
  const std::size_t stride =
      max_coords == 0 || d <= max_coords ? 1 : (d + max_coords - 1) / max_coords;
  const double inv_m = 1.0 / static_cast<double>(others.size());
  double sum = 0;
  std::size_t read = 0;
  for (std::size_t k = 0; k < d; k += stride, ++read) {
    double mean = 0;
    for (const std::span<const float>& o : others) mean += o[k];
    const double diff = x[k] - mean * inv_m;
    sum += diff * diff;
  }
  return sum * static_cast<double>(d) / static_cast<double>(read);
}

Neighbourhood::Neighbourhood(int node, const config::TrainConfig& config,
                             const topology::Topology& topology,
                             daemon::ParameterExchange& exchange, int iterations_per_exchange)
    : self_(node),
      per_exchange_(iterations_per_exchange),
      cfg_(config),
      topology_(topology),
      exchange_(exchange),
      deadline_(std::chrono::milliseconds(config.timeouts().deadline_ms())),
      carry_on_(carry_on_policy()),
      everyone_(daemon::all_neighbours(topology, node)),
      peers_(exchange),
      mh_(carry_on_ && daemon::uses_metropolis_hastings(topology, node)),
      standby_(config.fault().standby_nodes().begin(), config.fault().standby_nodes().end()),
      standby_self_(std::find(standby_.begin(), standby_.end(), node) != standby_.end()) {
  for (int j : everyone_) samples_[j].peer = j;
}

std::vector<int> Neighbourhood::senders(const topology::Topology& topology, int node) {
  return over_period(topology, [&](int t) { return topology.in_neighbors(node, t); });
}

std::vector<int> Neighbourhood::receivers(const topology::Topology& topology, int node) {
  return over_period(topology, [&](int t) { return topology.out_neighbors(node, t); });
}

bool Neighbourhood::carry_on_policy() const {
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

void Neighbourhood::start(daemon::RunServices& services) {
  services_ = &services;
  membership_ = std::make_unique<daemon::Membership>(
      daemon::Membership::Options{
          self_, everyone_, cfg_.fault().admit_margin(),
          std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count(), standby_},
      peers_, services.clock);
  if (!carry_on_) return;
  for (int j : everyone_) {
    if (std::find(standby_.begin(), standby_.end(), j) == standby_.end()) continue;
    GOSSIP_LOG(kInfo) << "node " << j
                      << " is a standby node (fault.standby_nodes): not mixed until it joins";
  }
}

void Neighbourhood::leave(std::uint64_t t) {
  if (!carry_on_ || !membership_) return;
  const daemon::MembershipActions a = membership_->leave(t);
  GOSSIP_LOG(kInfo) << "leaving at iteration " << iteration(t) << ": told " << a.send.size()
                    << " neighbours";
  carry_out(a, t);
}

// Carries out Membership's decisions at exchange t.
void Neighbourhood::carry_out(const daemon::MembershipActions& a, std::uint64_t t) {
  daemon::MetricsWriter& metrics = services_->metrics;
  for (const auto& [to_peer, message] : a.send) {
    GOSSIP_LOG(kDebug) << "membership: to node " << to_peer << " " << describe(message)
                       << " (at exchange " << t << ")";
    exchange_.send_admission(to_peer, message);
  }
  for (int j : a.admitted) {
    exchange_.skip_before(j, t);  // nothing it sent before the gap may fill a receive
    changed_.insert(j);
    samples_[j].admissions++;
    GOSSIP_LOG(kInfo) << "edge to node " << j << " re-admitted from iteration " << iteration(t);
    metrics.event(iteration(t), "edge_admitted",
                  "node " + std::to_string(j) + " from iteration " + std::to_string(iteration(t)),
                  j);
  }
  for (const auto& [j, reason] : a.dropped) {
    changed_.insert(j);
    samples_[j].drops++;
    GOSSIP_LOG(kWarning) << "dropping the edge to node " << j << " from iteration " << iteration(t)
                         << ": " << reason;
    metrics.event(iteration(t), "edge_dropped", "node " + std::to_string(j) + ": " + reason, j);
  }
}

std::set<int> Neighbourhood::take_changed_edges() { return std::exchange(changed_, {}); }

// A restarted node (resumed from a checkpoint while its neighbours are ahead) rejoins at an
// agreed t_a (membership.h); returns the exchange to go on from.
std::uint64_t Neighbourhood::rejoin(std::uint64_t start, std::uint64_t total) {
  if (!carry_on_) return start;
  std::optional<std::uint64_t> ahead = membership_->begin_rejoin(start, joining_);
  if (!ahead) return start;
  Clock& clock = services_->clock;
  daemon::MembershipActions actions;
  for (int round = 0; round < daemon::Membership::kRejoinRounds && !interrupted(); ++round) {
    carry_out(membership_->propose_rejoin(start), start);
    // Answers (and crossing proposals) arrive within the deadline.
    const std::int64_t until_ns =
        clock.monotonic_ns() +
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count();
    while (membership_->awaiting_answers() && clock.monotonic_ns() < until_ns && !interrupted()) {
      clock.sleep_for_ns(2'000'000);
      carry_out(membership_->receive(take_admissions(exchange_), start), start);
    }
    actions = {};
    const bool agreed = membership_->end_rejoin_round(round, start, actions);
    carry_out(actions, start);
    // Nothing a neighbour sends for an iteration before the rejoin iteration will be used. Saying
    // so also frees the link: a neighbour that started an agreement withdrawn just now sends its
    // x^t, which the transport holds back while this node is still at `start` (far behind), and
    // with it every message behind it on that link — the neighbour's answer to the next round's
    // proposal among them.
    for (int j : everyone_) exchange_.skip_before(j, membership_->rejoin_iteration());
    if (agreed) break;
  }
  actions = {};
  const std::uint64_t t_a = membership_->finish_rejoin(start, actions);
  carry_out(actions, start);
  GOSSIP_LOG(kInfo) << (joining_ ? "joining (standby node)"
                                 : "rejoining: checkpoint at iteration " +
                                       std::to_string(iteration(start)))
                    << ", neighbours at up to " << iteration(*ahead) << "; jumping to iteration "
                    << iteration(t_a) << " (" << membership_->agreed() << " of " << everyone_.size()
                    << " neighbours accepted)";
  if (t_a < total) rejoin_at_ = t_a;
  return t_a;
}

void Neighbourhood::plan(std::uint64_t t, std::int64_t time) {
  if (carry_on_) {
    std::vector<daemon::Admission> messages = std::exchange(held_, {});
    for (daemon::Admission& a : take_admissions(exchange_)) messages.push_back(a);
    carry_out(membership_->start_iteration(t, messages), t);
  }
  in_ = topology_.in_neighbors(self_, time);
  out_ = topology_.out_neighbors(self_, time);
  if (carry_on_) {
    auto is_dropped = [&](const topology::Neighbor& nb) {
      return membership_->is_dropped(nb.node);
    };
    std::erase_if(in_, is_dropped);
    std::erase_if(out_, is_dropped);
  }
  planned_ = static_cast<std::uint32_t>(in_.size());  // d_i(t)
  planned_t_ = t;
  exchange_.set_iteration(t, planned_);
  to_.clear();
  for (const topology::Neighbor& nb : out_) to_.push_back(nb.node);
  unusable_.clear();
  pending_.clear();
}

void Neighbourhood::post(std::uint64_t t, std::span<const float> payload,
                         std::span<const daemon::Inbox> from) {
  pending_.push_back(exchange_.begin(t, payload, to_, from));
}

void Neighbourhood::post_each(std::uint64_t t, std::span<const Outgoing> to,
                              std::span<const daemon::Inbox> from) {
  // One exchange per destination; the receives ride on the first (or on their own).
  if (to.empty()) pending_.push_back(exchange_.begin(t, {}, {}, from));
  for (std::size_t k = 0; k < to.size(); ++k) {
    const int peer = to[k].peer;
    pending_.push_back(exchange_.begin(t, to[k].payload, std::span<const int>(&peer, 1),
                                       k == 0 ? from : std::span<const daemon::Inbox>()));
  }
}

std::map<int, std::string> Neighbourhood::receive(std::uint64_t t,
                                                  std::span<const daemon::Inbox> from) {
  std::unique_ptr<daemon::PendingExchange> first = exchange_.begin(t, {}, {}, from);
  std::map<int, std::string> failed;
  for (const daemon::NeighbourFailure& f : first->wait(
           after_deadline(), [this] { return interrupted(); }, behind_of(exchange_, t))) {
    failed.emplace(f.peer, f.status.to_string());
  }
  unusable_.insert(failed.begin(), failed.end());
  return failed;
}

std::optional<daemon::IterationEnd> Neighbourhood::wait(
    std::uint64_t t, const std::function<std::string(int)>& check) {
  // A neighbour that is connected but still finishing exchange t-1 (held up by a failure
  // elsewhere) is waited for longer; under fail-stop only the deadline counts.
  for (std::unique_ptr<daemon::PendingExchange>& p : pending_) {
    for (const daemon::NeighbourFailure& f : p->wait(
             after_deadline(), [this] { return interrupted(); },
             carry_on_ ? behind_of(exchange_, t) : std::function<bool(int)>())) {
      unusable_.emplace(f.peer, f.status.to_string());
    }
    for (const auto& [peer, wait_s] : p->receive_waits_s()) samples_[peer].wait_s += wait_s;
  }
  pending_.clear();
  for (const topology::Neighbor& nb : in_) {
    if (unusable_.count(nb.node)) continue;
    if (std::string why = check(nb.node); !why.empty()) unusable_.emplace(nb.node, why);
  }
  if (!unusable_.empty() && interrupted()) {
    return abandon(daemon::kExitStopped, "stop requested (signal)");
  }
  used_.clear();
  if (!carry_on_) {
    if (!unusable_.empty()) {
      std::string why;
      for (const auto& [peer, reason] : unusable_) {
        GOSSIP_LOG(kError) << "neighbour " << peer << " failed at iteration " << iteration(t)
                           << ": " << reason;
        why += (why.empty() ? "" : "; ") + std::string("neighbour ") + std::to_string(peer) + ": " +
               reason;
      }
      return abandon(daemon::kExitNeighbourFailed, why);
    }
    for (const topology::Neighbor& nb : in_) used_[nb.node] = 0;
    mark_used();
    return std::nullopt;
  }
  // Verdict phase: the edge is used at t iff both ends have each other's message and both
  // verdicts arrived; otherwise both ends drop it from t on.
  std::vector<int> peers;
  for (const topology::Neighbor& nb : in_) {
    peers.push_back(nb.node);
    exchange_.send_verdict(nb.node, {t, unusable_.count(nb.node) == 0, planned_});
  }
  // Our verdicts are out: a neighbour that gets them all uses the edge at t. A stop request now
  // finishes t (the neighbours' verdicts normally follow within milliseconds), so that the Leave
  // names t+1 and both ends agree on t; it abandons t only when they have not come within a
  // deadline of the request.
  std::map<int, daemon::Verdict> verdicts;
  std::optional<std::chrono::steady_clock::time_point> stop_seen;
  const auto give_up = [&] {
    if (!interrupted()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (!stop_seen) stop_seen = now;
    return now - *stop_seen >= deadline_;
  };
  if (!peers.empty()) verdicts = exchange_.wait_verdicts(t, peers, after_deadline(), give_up);
  if (verdicts.size() < peers.size() && interrupted()) {
    return abandon(daemon::kExitStopped, "stop requested (signal)");
  }
  // A neighbour that announced its leave for t is dropped as such (not as a failure).
  std::vector<daemon::Admission> taken = take_admissions(exchange_);
  membership_->note_leaves(taken);
  held_.insert(held_.end(), taken.begin(), taken.end());
  daemon::MembershipActions actions;
  used_ = membership_->decide(peers, unusable_, verdicts, actions);
  mark_used();
  carry_out(actions, t);
  if (used_.size() < peers.size()) {
    GOSSIP_LOG(kWarning) << "active degree dropped to " << used_.size() << " at iteration "
                         << iteration(t);
    if (membership_->partitioned()) {
      GOSSIP_LOG(kWarning) << "partitioned: no neighbours left at iteration " << iteration(t)
                           << "; training alone";
      services_->metrics.event(iteration(t), "partitioned", "no neighbours left; training alone");
    }
  }
  return std::nullopt;
}

void Neighbourhood::mark_used() {
  for (auto& [j, sample] : samples_) sample.in_use = used_.count(j) != 0;
}

void Neighbourhood::observe(daemon::MetricsSnapshot& s) const {
  const std::map<int, daemon::ParameterExchange::PeerBytes> bytes = exchange_.bytes_by_peer();
  s.neighbours.clear();
  std::uint64_t ahead = 0;
  for (const auto& [j, sample] : samples_) {
    s.neighbours.push_back(sample);
    if (auto b = bytes.find(j); b != bytes.end()) {
      s.neighbours.back().bytes_sent = b->second.sent;
      s.neighbours.back().bytes_received = b->second.received;
    }
    // A neighbour at exchange a_j is a_j - (t+1) exchanges ahead of the one this node starts next.
    if (std::optional<std::uint64_t> at = exchange_.peer_iteration(j); at && *at > planned_t_ + 1) {
      ahead = std::max(ahead, *at - planned_t_ - 1);
    }
  }
  s.lag_iterations = ahead * static_cast<std::uint64_t>(per_exchange_);
  s.rejoins_total = rejoins_;
  s.joins_total = joins_;
}

daemon::RowWeights Neighbourhood::weights(std::uint64_t t, std::int64_t time) {
  daemon::RowWeights w = daemon::row_weights(topology_, self_, time, mh_, planned_, used_);
  std::vector<std::pair<int, double>> row = w.row(self_);
  if (!row_logged_ || row != last_row_) {
    services_->metrics.weights(iteration(t), row);
    last_row_ = std::move(row);
    row_logged_ = true;
  }
  return w;
}

void Neighbourhood::reset_byte_counts() {
  counted_sent_ = bytes_sent();
  counted_received_ = bytes_received();
}

void Neighbourhood::take_byte_counts(daemon::IterationStats& stats) {
  stats.bytes_sent = bytes_sent() - counted_sent_;
  stats.bytes_received = bytes_received() - counted_received_;
  reset_byte_counts();
}

void Neighbourhood::finish_stats(daemon::IterationStats& stats, std::int64_t t0, std::int64_t t1,
                                 std::int64_t t2, std::int64_t now, bool overlap) {
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  stats.wait_s = static_cast<double>(t2 - t1) * 1e-9;
  stats.exchange_s = static_cast<double>(t2 - (overlap ? t0 : t1)) * 1e-9;
  stats.iteration_s = static_cast<double>(now - t0) * 1e-9;
  take_byte_counts(stats);
}

}  // namespace gossip::algorithms

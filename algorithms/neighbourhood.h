// Neighbourhood: the gossip side of a node, shared by the gossip algorithms (algorithms/dpsgd.h,
// algorithms/local_gossip.h). Per exchange t — an iteration of D-PSGD, a round of local-step
// gossip — it plans the neighbours of W(time) (dropped edges left out), posts the messages over
// daemon::ParameterExchange, waits for the neighbours' with the deadline, and decides which edges
// are used: under fail-stop a missing one ends the run; under carry-on (symmetric W only) both ends
// exchange verdicts and drop a failed edge together, re-admit healed ones and let a restarted node
// rejoin (daemon/membership.h, docs/design.md §7). It never touches parameters: what a message
// holds and how it is mixed is the algorithm's.
//
// Used from the driver's thread; the exchange's buffers are borrowed from post() until wait()
// returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
#include "daemon/membership.h"
#include "topology/topology.h"

namespace gossip::algorithms {

// One message to one out-neighbour (an algorithm that sends each neighbour its own payload).
struct Outgoing {
  int peer = -1;
  std::span<const float> payload;
};

// ||x − (1/m) Σ_k others[k]||² over the coordinates of x (all of equal size, m ≥ 1), or — when x
// has more than `max_coords` — an estimate from every s-th coordinate (s = ⌈d / max_coords⌉, from
// coordinate 0) scaled by d / (coordinates read). Sums in double. The node-local consensus-distance
// estimate of docs/daemon.md (Kong et al., ICML 2021).
double distance_to_mean_sq(std::span<const float> x, std::span<const std::span<const float>> others,
                           std::size_t max_coords);

class Neighbourhood {
 public:
  // Node `node` of `topology` under `config`, over `exchange` (all borrowed for the run).
  // `iterations_per_exchange`: exchange t covers iterations [t·k, t·k + k) (k = H for rounds), so
  // logs and metrics events name iteration t·k.
  Neighbourhood(int node, const config::TrainConfig& config, const topology::Topology& topology,
                daemon::ParameterExchange& exchange, int iterations_per_exchange = 1);

  // Every node that sends to `node` at some time of the topology's period, ascending.
  static std::vector<int> senders(const topology::Topology& topology, int node);
  // Every node `node` sends to at some time of the topology's period, ascending.
  static std::vector<int> receivers(const topology::Topology& topology, int node);

  // Once, before the first exchange (the membership protocol needs the run's clock).
  void start(daemon::RunServices& services);
  bool carry_on() const { return carry_on_; }
  // A restarted node (resumed at exchange `start` while its neighbours are ahead) agrees on an
  // exchange t_a with them; returns where to go on. rejoin_due(t): the node has not taken its
  // neighbours' state yet (the algorithm does at t, then calls rejoined()).
  std::uint64_t rejoin(std::uint64_t start, std::uint64_t total);
  // A standby node (fault.standby_nodes) starting without a checkpoint joins the running job the
  // same way, from `start` = 0: its x is its neighbours' average at the agreed t_a.
  bool joins(bool rejoining) const { return carry_on_ && standby_self_ && !rejoining; }
  std::uint64_t join(std::uint64_t total) {
    joining_ = true;
    return rejoin(0, total);
  }
  // The metrics event of the algorithm's rejoin: "joined" for a standby node's join.
  const char* rejoin_event() const { return joining_ ? "joined" : "rejoined"; }
  // The node stops at exchange t (a stop request): under carry-on its neighbours are told, so they
  // drop the edge from t on at once (Membership::leave).
  void leave(std::uint64_t t);
  bool rejoin_due(std::uint64_t t) const { return rejoin_at_ && t >= *rejoin_at_; }
  void rejoined() {
    rejoin_at_.reset();
    ++(joining_ ? joins_ : rejoins_);
  }

  // Exchange t with the neighbours of W(time): membership events, then in() and out().
  void plan(std::uint64_t t, std::int64_t time);
  const std::vector<topology::Neighbor>& in() const { return in_; }    // W_ij: row weights
  const std::vector<topology::Neighbor>& out() const { return out_; }  // W_oi: their weights
  // Edges dropped or re-admitted since the last call (an algorithm with per-edge state resets it).
  std::set<int> take_changed_edges();

  // Posts exchange t: `payload` to every out-neighbour (or each its own), receiving one inbox per
  // in() neighbour, in that order.
  void post(std::uint64_t t, std::span<const float> payload, std::span<const daemon::Inbox> from);
  void post_each(std::uint64_t t, std::span<const Outgoing> to,
                 std::span<const daemon::Inbox> from);
  // Receives only (the first exchange of a rejoin): returns the neighbours whose data failed.
  std::map<int, std::string> receive(std::uint64_t t, std::span<const daemon::Inbox> from);

  // Waits for exchange t; `check(peer)` says why a received message cannot be used ("" if it
  // can). Decides used(); returns the end of the run when the exchange ends it.
  std::optional<daemon::IterationEnd> wait(std::uint64_t t,
                                           const std::function<std::string(int)>& check);
  // The edges used at t: neighbour -> its planned degree d_j(t).
  const std::map<int, std::uint32_t>& used() const { return used_; }
  // Node i's row of W(time) for the used edges (daemon::row_weights), logged to the metrics when it
  // changed.
  daemon::RowWeights weights(std::uint64_t t, std::int64_t time);

  std::uint64_t bytes_sent() const { return exchange_.bytes_sent(); }
  std::uint64_t bytes_received() const { return exchange_.bytes_received(); }
  // Sets `stats`' bytes sent and received to what went over the links since the previous call
  // (the first call: since the first reset_byte_counts()).
  void reset_byte_counts();
  void take_byte_counts(daemon::IterationStats& stats);
  // A gossip iteration's times (clock readings in ns: t0 its start, t1 the local step done, t2 the
  // neighbours' data in, now its end; with overlap the exchange ran from t0) and its byte counts.
  void finish_stats(daemon::IterationStats& stats, std::int64_t t0, std::int64_t t1,
                    std::int64_t t2, std::int64_t now, bool overlap);

  // The live snapshot's neighbour part (daemon/prometheus.h) after the last exchange waited for:
  // every neighbour of the period with its bytes, waits, drops and admissions, the lag behind the
  // most advanced one (in iterations), and the rejoins.
  void observe(daemon::MetricsSnapshot& snapshot) const;

 private:
  bool carry_on_policy() const;
  bool interrupted() const { return services_->interrupted(); }
  // A deadline for the exchange's and mailbox's condition-variable waits, which run on real time
  // (std::chrono::steady_clock); the algorithms' own timings use the injected clock.
  daemon::SteadyTime after_deadline() const { return std::chrono::steady_clock::now() + deadline_; }
  void carry_out(const daemon::MembershipActions& actions, std::uint64_t t);
  void mark_used();                                        // samples_[j].in_use from used_
  std::uint64_t counted_sent_ = 0, counted_received_ = 0;  // take_byte_counts' last reading

  class ExchangePeers final : public daemon::PeerView {
   public:
    explicit ExchangePeers(const daemon::ParameterExchange& exchange) : exchange_(exchange) {}
    bool link_up(int peer) const override { return exchange_.link_up(peer); }
    std::optional<std::uint64_t> peer_iteration(int peer) const override {
      return exchange_.peer_iteration(peer);
    }

   private:
    const daemon::ParameterExchange& exchange_;
  };

  // The first iteration of exchange t (what logs and metrics name).
  std::uint64_t iteration(std::uint64_t t) const { return t * per_exchange_; }

  const int self_;
  const int per_exchange_;
  const config::TrainConfig& cfg_;
  const topology::Topology& topology_;
  daemon::ParameterExchange& exchange_;
  const std::chrono::milliseconds deadline_;
  const bool carry_on_;
  const std::vector<int> everyone_;
  const ExchangePeers peers_;
  const bool mh_;
  const std::vector<int> standby_;  // fault.standby_nodes
  const bool standby_self_;
  bool joining_ = false;
  // Admissions taken during an exchange (for its Leave messages), given to the next plan().
  std::vector<daemon::Admission> held_;
  std::unique_ptr<daemon::Membership> membership_;  // made in start() (it needs the clock)
  daemon::RunServices* services_ = nullptr;
  std::optional<std::uint64_t> rejoin_at_;

  // Exchange t.
  std::vector<topology::Neighbor> in_, out_;
  std::uint32_t planned_ = 0;
  std::vector<int> to_;
  std::map<int, std::string> unusable_;  // why a neighbour's message cannot be used
  std::map<int, std::uint32_t> used_;
  std::vector<std::unique_ptr<daemon::PendingExchange>> pending_;
  std::set<int> changed_;
  std::vector<std::pair<int, double>> last_row_;  // the row of W in the last weights line
  bool row_logged_ = false;

  // Counters for observe(), since the run started.
  std::map<int, daemon::NeighbourSample> samples_;  // every neighbour of the period
  std::uint64_t rejoins_ = 0;
  std::uint64_t joins_ = 0;
  std::uint64_t planned_t_ = 0;  // the last exchange planned
};

}  // namespace gossip::algorithms

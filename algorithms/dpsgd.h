// D-PSGD (Lian et al., NeurIPS 2017, Algorithm 1) as an algorithm of the node driver
// (daemon/algorithm.h), independent of how parameters travel (daemon/exchange.h): the same code
// runs in gossipd processes over TCP and in threads over an in-process hub in unit tests.
//
// Iteration t at node i:
//   1. post the exchange: send x_t to N_out(i, t), receive x_j^t from N_in(i, t) (the network
//      progresses on the transport's io thread from here on);
//   2. meanwhile: the local step's gradient at x_t (LocalStep::gradient);
//   3. wait for the neighbours' x_j^t (deadline: timeouts.deadline_ms);
//   4. u_t ← the step's direction, then in one fused pass
//      x_{t+1} = Σ_{j ∈ N_in(i,t) ∪ {i}} W_ij(t) x_j^t − γ_t u_t, the terms in increasing j
//      (the order gossip-sim uses, so the bits agree).
// With no_overlap the exchange is posted after step 2 instead (benchmarks).
//
// Faults (docs/design.md §7). Fail-stop: a neighbour whose data does not arrive by the deadline
// (or whose link fails) abandons the iteration with kExitNeighbourFailed (the driver writes the
// checkpoint of x_t). Carry-on (symmetric W only): both ends of an edge exchange verdicts after
// the data and drop a failed edge together (daemon/membership.h); healed links are re-admitted
// and a resumed node rejoins at an agreed iteration by taking its neighbours' average. A stop
// request while waiting abandons the iteration with kExitStopped.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
#include "daemon/membership.h"
#include "daemon/node.h"
#include "topology/topology.h"

namespace gossip::algorithms {

using daemon::IterationOutcome;
using daemon::LocalStep;
using daemon::ParameterBuffers;
using daemon::RunServices;

class Dpsgd final : public daemon::Algorithm {
 public:
  // Node `node` of `topology` under `config` over `exchange` (all borrowed for the run).
  Dpsgd(int node, const config::TrainConfig& config, const topology::Topology& topology,
        daemon::ParameterExchange& exchange);

  // Every node that sends to `node` at some iteration (one receive buffer each).
  static std::vector<int> senders(const topology::Topology& topology, int node);

  std::string_view name() const override { return "dpsgd"; }
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              RunServices& services, int* exit_code) override;
  IterationOutcome iterate(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers) override;

 private:
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

  bool carry_on_policy() const;
  bool interrupted() const { return services_->interrupted(); }
  // A deadline for the exchange's and mailbox's condition-variable waits, which run on real time
  // (std::chrono::steady_clock); the loop's own timings use the injected clock.
  daemon::SteadyTime after_deadline() const { return std::chrono::steady_clock::now() + deadline_; }
  void carry_out(const daemon::MembershipActions& actions, std::uint64_t t);
  void plan(std::uint64_t t, ParameterBuffers& buffers);
  std::uint64_t rejoin(std::uint64_t start, std::uint64_t total);
  void rejoin_average(std::uint64_t t, ParameterBuffers& buffers);
  void post_exchange(std::uint64_t t, ParameterBuffers& buffers);
  std::optional<daemon::IterationEnd> gossip(std::uint64_t t, ParameterBuffers& buffers);
  daemon::IterationStats mix(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers,
                             daemon::IterationStats stats);

  const int self_;
  const config::TrainConfig& cfg_;
  const topology::Topology& topology_;
  daemon::ParameterExchange& exchange_;
  const std::chrono::milliseconds deadline_;
  const bool carry_on_;
  const std::vector<int> everyone_;
  const ExchangePeers peers_;
  std::unique_ptr<daemon::Membership> membership_;  // made in start() (it needs the clock)
  const bool mh_;
  RunServices* services_ = nullptr;
  std::optional<std::uint64_t> rejoin_at_;  // set while a restarted node has not rejoined yet
  std::uint64_t sent_before_ = 0, received_before_ = 0;

  // Iteration t.
  std::vector<topology::Neighbor> in_;
  std::uint32_t planned_ = 0;
  std::vector<int> to_;
  std::vector<daemon::Inbox> from_;
  std::map<int, std::string> unusable_;  // why a neighbour's x_j^t cannot be mixed
  std::map<int, std::uint32_t> used_;    // neighbour -> its planned degree d_j(t)
  std::unique_ptr<daemon::PendingExchange> pending_;
  std::vector<std::pair<int, double>> last_row_;  // the row of W in the last weights line
  bool row_logged_ = false;
};

}  // namespace gossip::algorithms

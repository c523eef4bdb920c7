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

#include <cstdint>
#include <optional>
#include <vector>

#include "algorithms/neighbourhood.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
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

  std::string_view name() const override { return "dpsgd"; }
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              RunServices& services, int* exit_code) override;
  IterationOutcome iterate(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers) override;
  // Neighbours, lag and rejoins (Neighbourhood::observe) and the consensus-distance estimate.
  void observe(daemon::MetricsSnapshot& snapshot) const override;
  // Tells the neighbours (carry-on) that this node takes no part in iteration t or later.
  void leave(std::uint64_t t) override { neighbours_.leave(t); }

  // The estimate is refreshed at most this often (run time), from at most kConsensusCoords
  // coordinates: its cost stays a small fraction of training whatever the model's size.
  static constexpr std::int64_t kConsensusEveryNs = 1'000'000'000;
  static constexpr std::size_t kConsensusCoords = std::size_t{1} << 16;

 private:
  void rejoin_average(std::uint64_t t, ParameterBuffers& buffers);
  void estimate_consensus(std::uint64_t t, ParameterBuffers& buffers);
  daemon::IterationStats mix(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers,
                             daemon::IterationStats stats);

  const int self_;
  const config::TrainConfig& cfg_;
  Neighbourhood neighbours_;
  RunServices* services_ = nullptr;
  std::vector<daemon::Inbox> from_;  // iteration t's receive buffers
  // The last consensus-distance estimate: when (clock ns), at which iteration, its value.
  std::optional<std::int64_t> consensus_at_ns_;
  std::uint64_t consensus_iteration_ = 0;
  std::optional<double> consensus_sq_;
};

}  // namespace gossip::algorithms

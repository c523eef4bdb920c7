// Local-step gossip (docs/design.md §1, "Local steps, the outer optimizer, compression"): D-PSGD's
// family with H local steps per communication round, an outer optimizer on the pseudo-gradient
// and compressed messages (CHOCO-SGD), as an algorithm of the node driver (daemon/algorithm.h):
// local SGD with gossip averaging (Koloskova et al. 2020, arXiv 2003.10422), with SlowMo's and
// DiLoCo's outer step over gossip (Wang et al., ICLR 2020; NoLoCo, arXiv 2506.10911).
//
// Round r covers iterations [rH, rH + H) (the last one may be shorter: the run's end), uses W(r)
// (a time-varying topology advances per round), and is exchange r of the Neighbourhood. Its
// iterations are the local step's: gradient, direction, x ← x − γ_t u_t. At its last iteration,
// after the inner step, y is x and Δ = fl(s − y) with s the round's start, and (sgd/round.h):
//   the message m = fl(a − Δ) (a the anchor) goes to the out-neighbours — m itself, or with CHOCO
//   to each out-neighbour o the compressed C(fl(m − ĉ_{i→o})); the neighbours' are waited for
//   (deadline, verdicts as D-PSGD's); the used edges' copies take the round's messages; z is the
//   combine of sgd/round.h and the outer step gives the next anchor, which is x and the next start.
// With overlap, round r's messages are combined at the end of round r+1 (their exchange runs
// during its inner steps), and round r+1 starts at m itself.
// An attached trainer takes its own H steps between POSTs (docs/attach.md): each iteration of the
// driver is then a whole round, y is what it posted, and its first post starts the anchor (the
// first round averages the first posts).
//
// Faults: as D-PSGD's (algorithms/neighbourhood.h), per round. A CHOCO copy is per directed edge,
// held by both ends; when an edge is dropped or re-admitted both ends reset its copies (both
// directions) to zero at the same round, so they stay identical. A rejoining node waits for its
// neighbours' messages of the agreed round, takes their mean (on reset CHOCO edges a message is
// C(m_j)) as x, and sends x as its own. A failed round (fail-stop) puts everything back as it was
// before the round's last inner step, for the driver's checkpoint.
//
// State in a checkpoint: the anchor, the round's start, the outer momentum, every edge's copies
// (CHOCO) and, with overlap, the message in flight — so a job resumed from a checkpoint, mid-round
// or not, continues bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "algorithms/neighbourhood.h"
#include "algorithms/round_algorithm.h"
#include "daemon/exchange.h"
#include "sgd/backend.h"
#include "topology/topology.h"

namespace gossip::algorithms {

class LocalGossip final : public RoundAlgorithm {
 public:
  // Node `node` of `topology` under `config` over `exchange` (borrowed for the run), for a model
  // of `num_params` floats. `attached`: the local step is an external trainer (one round per
  // iteration of the driver).
  LocalGossip(int node, const config::TrainConfig& config, const topology::Topology& topology,
              daemon::ParameterExchange& exchange, std::size_t num_params, bool attached);

  // The floats (4-byte words) one message of `round` takes: num_params, or the compressed bytes
  // padded to whole words.
  static std::size_t message_floats(const sgd::RoundConfig& round, std::size_t num_params);
  // Floats of state a checkpoint holds at node `node` (round_algorithm.h; its own vectors: every
  // edge's copies, with CHOCO, then, with overlap, the message in flight).
  static std::size_t state_floats(const sgd::RoundConfig& round, const topology::Topology& topology,
                                  int node, std::size_t num_params);

  std::string_view name() const override { return "local-gossip"; }
  daemon::IterationOutcome iterate(std::uint64_t t, daemon::LocalStep& step,
                                   daemon::ParameterBuffers& buffers) override;
  // Neighbours, lag and rejoins (Neighbourhood::observe); no consensus-distance estimate: the
  // messages are the round's models relative to anchors, possibly compressed, not x_j.
  void observe(daemon::MetricsSnapshot& snapshot) const override { neighbours_.observe(snapshot); }
  // Stopping at iteration t: round t / H is not exchanged (Neighbourhood::leave).
  void leave(std::uint64_t t) override { neighbours_.leave(t / per_round_); }

 private:
  Result<std::uint64_t> start_rounds(std::uint64_t start, bool rejoining, int* exit_code) override;
  bool exchange_in_flight() const override { return in_flight_.has_value(); }
  // Round r's end with y (sets x); an IterationEnd when the round failed.
  std::optional<daemon::IterationEnd> end_round(std::uint64_t r, std::span<const float> y,
                                                daemon::ParameterBuffers& buffers);
  void post(std::uint64_t r);
  std::optional<daemon::IterationEnd> wait_and_combine(std::uint64_t r);
  std::optional<daemon::IterationEnd> rejoin_round(std::uint64_t r,
                                                   daemon::ParameterBuffers& buffers);
  std::string check_message(int peer, std::uint64_t r);
  void apply_copies();
  void reset_changed_edges();
  std::span<std::byte> bytes_of(std::vector<float>& words);

  const config::TrainConfig& cfg_;
  const topology::Topology& topology_;
  const std::size_t message_floats_;
  Neighbourhood neighbours_;
  std::unique_ptr<sgd::Backend> cpu_;  // the round's arithmetic (sgd/round.h), host memory

  std::vector<float> message_, delta_, z_, scratch_;
  std::optional<std::uint64_t> in_flight_;      // the round whose messages are posted, not combined
  std::map<int, std::vector<float>> copy_in_;   // ĉ_{j→i}, every sender j of the period
  std::map<int, std::vector<float>> copy_out_;  // ĉ_{i→o}, every receiver o of the period
  std::map<int, std::vector<float>> inbox_;     // the round's message from each sender
  std::map<int, std::vector<float>> outbox_;    // CHOCO: the round's message to each receiver
  std::map<int, bool> received_;                // the round's message already taken (a rejoin)
  std::vector<sgd::MixTerm> terms_;
};

}  // namespace gossip::algorithms

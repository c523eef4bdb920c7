// What to run on a link (`gossip-topo advise`, docs/topology.md "Advice for a link"): the topology,
// local steps H, compression and overlap for n nodes training a model of d parameters at c seconds
// per step over one full-duplex link per node (bandwidth B, latency α). Every time is the cost
// model's that gossip-sim prices with (sim/experiment.h round_times on the topology's W(t)), every
// size sgd::gossip_message_bytes'; nothing is re-derived here. The rule:
//
//   1. Topology: of the generators for n (ring, torus, hypercube, exponential,
//      one_peer_exponential, complete; those that cannot be built for n are left out), the one
//      whose float32 gossip shrinks the consensus error 1000× in the least wire time,
//      iterations_1000x × (α + Δ·M/B) (topology/advisor.h: spectral gap and Δ of W(t)); ties go to
//      the smaller Δ, then to the earlier in that list.
//   2. Per-step D-PSGD on it (H = 1, float32): its wire fraction is 1 − c / (time per iteration).
//      At most kWireFractionLimit (10%): H = 1, no compression, no overlap — the link does not
//      bind.
//   3. Otherwise the link binds: int8 with overlap, and H the smallest of kLocalStepCandidates
//      whose round wire time overlap hides (a round of H steps takes H·c: wire fraction 0, i.e.
//      H·c ≥ α + Δ·M_int8/B). Overlap is always needed there: without it the same round's wire
//      fraction is w/(H·c + w) > 1/6, since the candidate before H did not hide w (H·c < 5w, the
//      candidates growing at most 5× apart) or, at H = 1, per-step float32 bound (w_int8 ≥ w/4 with
//      w > c/0.9). When no candidate hides it, the largest H with overlap, and `hidden` is false.
//
// The wire fraction of a round is 1 − H·c / (time per round). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sgd/round.h"
#include "topology/comm_cost.h"

namespace gossip::sim {

inline constexpr double kWireFractionLimit = 0.10;
inline constexpr int kLocalStepCandidates[] = {1, 5, 10, 25, 50, 100, 250, 500, 1000};

struct LinkAdviceInputs {
  topology::Link link;
  int nodes = 8;
  double params = 0;     // d, the model's parameters (a message: 4d bytes in float32)
  double compute_s = 0;  // c, one local step
};

// One candidate topology (step 1), float32 messages.
struct TopologyChoice {
  std::string name;
  int max_degree = 0;                 // Δ of W(t)
  double gap_per_iteration = 0;       // 1 − ρ per iteration
  std::int64_t iterations_1000x = 0;  // -1: never (no gap)
  double wire_s = 0;                  // α + Δ·M/B, one iteration
  double wire_to_1000x_s = 0;         // iterations_1000x × wire_s (infinite without a gap)
};

// One priced round setting on the chosen topology.
struct RoundChoice {
  sgd::RoundConfig round;
  double message_bytes = 0;         // one compressed message
  double round_s = 0;               // time per round (round_times, averaged over W's period)
  double wire_fraction = 0;         // 1 − H·c / round_s
  double bytes_per_node_round = 0;  // sent by the busiest node per round (Δ messages)
};

struct LinkAdvice {
  LinkAdviceInputs inputs;
  std::vector<TopologyChoice> topologies;
  std::size_t chosen = 0;  // index into topologies
  RoundChoice per_step;    // H = 1, float32, no overlap: D-PSGD
  bool link_binds = false;
  // Step 3's table (int8, every candidate H, without and with overlap); empty when the link does
  // not bind.
  std::vector<RoundChoice> without_overlap, with_overlap;
  RoundChoice recommended;
  bool hidden = true;  // the recommended wire fraction meets the rule
};

// InvalidArgument for n < 2, d < 1, c ≤ 0 or a link that is not positive and finite.
Result<LinkAdvice> advise_link(const LinkAdviceInputs& inputs);

// The recommendation as lines of gossipd's training config (local_steps, compression, overlap;
// nothing for per-step D-PSGD's defaults) and the command that writes its topology file, as
// comments.
std::string training_config_snippet(const LinkAdvice& advice);

// The gossip-sim compare command line that checks the convergence of the recommendation against
// per-step D-PSGD and DiLoCo on the same link (the model and its data are the user's to add).
std::string compare_command(const LinkAdvice& advice);

}  // namespace gossip::sim

// The arithmetic of a communication round of local-step training (docs/design.md §1, "Local steps,
// the outer optimizer, compression"): what gossipd's algorithms (algorithms/local_gossip.h,
// algorithms/allreduce.h) and the simulator (sim/round_simulator.h) both call, so the two agree bit
// for bit.
//
// A round at node i: from its start s_i the node takes H steps of its own optimizer to y_i, and
// its progress is Δ_i = fl(s_i − y_i). Then, element-wise in float32:
//
//   gossip: the message m_i = fl(a_i − Δ_i) (a_i the anchor; m_i = y_i up to rounding when the
//     round started at the anchor), combined adapt-then-combine (local SGD with gossip averaging,
//     Koloskova et al. 2020):
//       compression none:    z_i = Σ_j W_ij m_j, one chain: acc = W_{i,j0} m_{j0};
//                            acc = fma(W_ij, m_j, acc) over j ∈ N_in(i) ∪ {i} in increasing j
//                            (i at its place)
//       CHOCO (bf16, int8):  z_i = m_i + γ Σ_{j ∈ N_in} W_ij ĉ_{j→i} − γ Σ_{o ∈ N_out} W_oi
//       ĉ_{i→o},
//                            one chain in that order (in-edges by increasing j, then out-edges by
//                            increasing o, weights fl(γ·W) rounded once from double); ĉ the
//                            public copies of sgd/choco.h, which track the messages
//     and the pseudo-gradient d_i = fl(a_i − z_i);
//   ALLREDUCE: d = mean_j Δ_j (sgd/ring_allreduce.h; compressed with error feedback: the ring
//     averages D(C(Δ_j + e_j)), allreduce_round_input below);
// then the outer step (sgd/outer_optimizer.h) on the anchor: outer_step(a, d, m) — for gossip
// with outer none simply a ← z — after which a is the next round's start (with overlap, the next
// round starts at fl(a − Δ) and d arrives one round late). Why the network average is preserved:
// with W doubly stochastic Σ_i Σ_j W_ij m_j = Σ_j m_j, and for CHOCO Σ_i Σ_{j→i} W_ij ĉ_{j→i} =
// Σ_i Σ_{i→o} W_oi ĉ_{i→o} (each edge's copy enters once with + at its receiver and once with − at
// its sender), so mean(z) = mean(m) = ā − Δ̄ whatever the copies hold, and the mean of d is Δ̄:
// the average follows DiLoCo's outer recursion on the mean pseudo-gradient exactly (up to float
// rounding), for gossip as for ALLREDUCE.
//
// Host memory (the cpu backend's kernels); not thread-safe per scratch.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"
#include "sgd/backend.h"
#include "sgd/compress.h"
#include "sgd/outer_optimizer.h"

namespace gossip::sgd {

// How a job's rounds run (config/sgd_config.h maps the training config here).
struct RoundConfig {
  int local_steps = 1;  // H ≥ 1
  OuterConfig outer;    // kind none: the combined model is the next anchor
  CompressionSpec compression;
  double choco_step = 1.0;  // gossip with compression: γ in (0, 1]
  bool overlap = false;     // apply round r's combination after round r+1's inner steps

  // H = 1, no outer optimizer, no compression, no overlap: every iteration communicates, and the
  // algorithms run as D-PSGD and C-PSGD (the fused per-iteration paths).
  bool per_iteration() const {
    return local_steps == 1 && outer.kind == OuterKind::kNone &&
           compression.kind == CompressionKind::kNone && !overlap;
  }
  // Whether gossip exchanges CHOCO messages (compressed differences) rather than parameters.
  bool choco() const { return compression.kind != CompressionKind::kNone; }
  Status validate() const;
};

// One term of a gossip combine: a neighbour's (or the node's own) vector and its weight.
struct RoundTerm {
  int node = 0;
  double weight = 0;
  const float* values = nullptr;
};

// The terms of z_i for gossip without compression: node `self`'s message with weight W_ii at its
// place among `neighbours` (W_ij and m_j, increasing j); a self weight of 0 leaves its term out (as
// D-PSGD's mix does). Appends to `out`.
void plain_gossip_terms(int self, double self_weight, const float* own_message,
                        std::span<const RoundTerm> neighbours, std::vector<MixTerm>& out);

// The terms of z_i for CHOCO gossip: m_i with weight 1, then fl(γ·W_ij)·ĉ_{j→i} for the in-edges
// (increasing j), then −fl(γ·W_oi)·ĉ_{i→o} for the out-edges (increasing o). Appends to `out`.
void choco_gossip_terms(const float* own_message, double choco_step,
                        std::span<const RoundTerm> in_edges, std::span<const RoundTerm> out_edges,
                        std::vector<MixTerm>& out);

// z = chain(terms) (Backend::mix without an update term); `z` must alias no input.
void combine(Backend& cpu, std::span<float> z, std::span<const MixTerm> terms);

// The gossip outer step: a ← z (outer none) or d = fl(a − z), outer_step(a, d, m). `d` is scratch
// of a's size (unused for none).
void gossip_outer_step(const OuterConfig& outer, std::span<float> anchor, std::span<const float> z,
                       std::span<float> d, std::span<float> m);

// ALLREDUCE's input from node i: v = fl(Δ + e); its compressed bytes C(v) with e ← v − D(C(v))
// (compress_with_feedback), and what the ring averages, D(C(v)), into `input`. With compression
// none, input = Δ exactly and e stays 0.
void allreduce_round_input(const CompressionSpec& spec, std::span<const float> delta,
                           std::span<float> residual, std::span<std::byte> bytes,
                           std::span<float> input);

}  // namespace gossip::sgd

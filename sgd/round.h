// The arithmetic of a communication round of local-step training (docs/design.md §1, "Local steps,
// the outer optimizer, compression"): what gossipd's algorithms (algorithms/local_gossip.h,
// algorithms/allreduce.h) and the simulator (sim/round_simulator.h) both call, so the two agree bit
// for bit.
//
// A round at node i: from its anchor a_i the node takes H steps of its own optimizer to y_i, and
// its progress is Δ_i = fl(a_i − y_i). Then, element-wise in float32:
//
//   gossip, compression none:  z_i = Σ_j W_ij a_j − Δ_i
//        one chain: acc = W_{i,j0} a_{j0}; acc = fma(W_ij, a_j, acc) over j ∈ N_in(i) ∪ {i}
//        in increasing j (i at its place); z = fma(−1, Δ_i, acc)
//   gossip, CHOCO (bf16, int8): z_i = a_i + γ Σ_{j ∈ N_in} W_ij ĉ_{j→i} − γ Σ_{o ∈ N_out} W_oi
//   ĉ_{i→o}
//        − Δ_i, one chain in that order (in-edges by increasing j, then out-edges by increasing
//        o, weights fl(γ·W) rounded once from double), ĉ the public copies of sgd/choco.h
//   ALLREDUCE:                 D = mean_j Δ_j (sgd/ring_allreduce.h; compressed with error
//        feedback: the ring averages D(C(Δ_j + e_j)), allreduce_round_input below)
//
// and the outer step (sgd/outer_optimizer.h):
//   gossip:    outer none: a_i ← z_i;  otherwise d = fl(a_i − z_i), outer_step(a_i, d, m_i)
//   ALLREDUCE: outer_step(a, D, m)  (outer none: a ← fl(a − D))
// after which a_i is the next round's anchor and start. Why the network average is preserved:
// with W doubly stochastic, Σ_i Σ_j W_ij a_j = Σ_j a_j and, for CHOCO, Σ_i Σ_{j→i} W_ij ĉ_{j→i} =
// Σ_i Σ_{i→o} W_oi ĉ_{i→o} (each edge's copy enters once with + at its receiver and once with − at
// its sender), so the mean of z is ā − Δ̄ whatever the copies hold, and the mean of d is Δ̄: the
// average follows DiLoCo's outer recursion on the mean pseudo-gradient exactly (up to float
// rounding).
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
  bool overlap = false;     // ALLREDUCE: apply round r's mean after round r+1's inner steps

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

// The terms of z_i for gossip without compression: node `self`'s anchor with weight W_ii at its
// place among `neighbours` (W_ij and a_j, increasing j); a self weight of 0 leaves its term out (as
// D-PSGD's mix does). Appends to `out`.
void plain_gossip_terms(int self, double self_weight, const float* own_anchor,
                        std::span<const RoundTerm> neighbours, std::vector<MixTerm>& out);

// The terms of z_i for CHOCO gossip: a_i with weight 1, then fl(γ·W_ij)·ĉ_{j→i} for the in-edges
// (increasing j), then −fl(γ·W_oi)·ĉ_{i→o} for the out-edges (increasing o). Appends to `out`.
void choco_gossip_terms(const float* own_anchor, double choco_step,
                        std::span<const RoundTerm> in_edges, std::span<const RoundTerm> out_edges,
                        std::vector<MixTerm>& out);

// z = chain(terms) − Δ (Backend::mix with γ = 1 and u = Δ); `z` must alias no input.
void combine(Backend& cpu, std::span<float> z, std::span<const MixTerm> terms,
             std::span<const float> delta);

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

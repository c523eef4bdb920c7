// CHOCO-SGD's compressed gossip (Koloskova, Stich and Jaggi, "Decentralized Stochastic Optimization
// and Gossip Algorithms with Compressed Communication", ICML 2019, arXiv 1902.00340, Alg. 1 and 2):
// instead of its parameters x, a node sends the compressed difference between x and a public copy
// ĉ that both ends of the edge hold, and both add the decoded difference to their copy. The copy
// tracks x however coarse the compressor, so gossip converges where sending C(x) would not.
//
// Copies live per directed edge j → i (ĉ_{j→i}, num_floats floats held identically by sender j and
// receiver i), not per node as in the paper's static graph: with a time-varying graph (a different
// peer every round) each edge's copy advances only in the rounds that edge is used.
//
// Arithmetic (compress.h's formats and ⊕), per element k:
//   sender    d_k = fl(x_k − ĉ_k);  q = C(d);  ĉ_k ← ĉ_k ⊕ D(q)_k     (choco_encode)
//   receiver                                   ĉ_k ← ĉ_k ⊕ D(q)_k     (choco_decode_apply)
// with ⊕ = fma(q_k, s, ĉ_k) for int8 and fl(ĉ_k + D_k) for bf16 and none: the same operation on
// the same bits at both ends, so the two copies stay bit-identical for as long as both start
// equal (zero) and apply the same messages in the same order. A message lost on one end (a dropped
// edge, a restarted peer) breaks that: reset both ends' copy of the edge to zero, or resend it in
// full, before the edge carries CHOCO messages again.
//
// With none the copy becomes fl(ĉ + fl(x − ĉ)): x exactly when ĉ = 0 (the first round), and within
// a rounding of x later. With int8, after one encode |x_k − ĉ_k| ≤ s/2 + (rounding) with
// s = max |x − ĉ| / 127 over k's block: a fixed x is approached by a factor of about 254 per round.
//
// Sizes as compress.h (out: compressed_bytes(spec, x.size()); copy.size() == x.size()); non-finite
// x poisons the copy and the message alike (compress.h), so check x first. Thread-safe.
#pragma once

#include <cstddef>
#include <span>

#include "sgd/compress.h"

namespace gossip::sgd {

// Sender j of edge j → i: out = C(x − copy); copy ← copy ⊕ D(out).
void choco_encode(const CompressionSpec& spec, std::span<const float> x, std::span<float> copy,
                  std::span<std::byte> out);

// Receiver i of edge j → i: copy ← copy ⊕ D(in) (decompress_add).
void choco_decode_apply(const CompressionSpec& spec, std::span<const std::byte> in,
                        std::span<float> copy);

}  // namespace gossip::sgd

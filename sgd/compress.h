// Compressors for what a communication round sends: a float32 vector becomes bytes on the wire and
// back. Pure, deterministic functions on host memory: every instruction-set level (common/isa.h)
// writes the same bytes and decodes the same floats, so gossipd and gossip-sim, which call this
// same code, stay bit-identical with compression on.
//
// Formats (little-endian; the build refuses a big-endian target), for n floats x_0 .. x_{n−1}:
//
//   none  raw float32: 4n bytes.
//   bf16  per element the upper 16 bits of x_k rounded to nearest, ties to even (the bfloat16 of
//         Kalamkar et al. 2019; PyTorch's float32 → bfloat16 conversion): 2n bytes. A NaN stays a
//         (quiet) NaN with its sign, ±inf stays ±inf, finite values beyond bfloat16's largest
//         (≈ 3.39e38) round to ±inf. Decoding is exact: the 16 bits shifted up, low bits zero.
//   int8  per block of block_floats consecutive elements (the last block may be shorter, len
//         elements): a float32 scale s = fl(max_k |x_k| / 127) (IEEE division), then len signed
//         bytes q_k = round_half_even(clamp(fl(x_k / s), −127, 127)); s = 0 and every q_k = 0 when
//         s rounds to 0 (an all-zero block, or max |x_k| ≤ 127 · 2⁻¹⁵⁰). Block b starts at byte
//         b · (4 + block_floats), so a block-aligned slice of the vector compresses to the matching
//         slice of the bytes. compressed_bytes = n + 4 · ⌈n / block_floats⌉.
//         Decoding: D_k = fl(q_k · s) (one IEEE multiply); any byte is accepted (−128 included).
//
// Non-finite input: callers check that a vector is finite before they compress it (the daemon
// never sends a diverged model; common/divergence.h). What happens otherwise is still defined, so
// a receiver's finiteness check catches it: none and bf16 carry inf and NaN through; an int8 block
// holding an inf or NaN gets a NaN scale and all q_k = 0, so every element of that block decodes
// to NaN. Decoding bytes from a peer can likewise give any float; check before using the result.
//
// Error feedback (Seide et al. 2014, "1-bit SGD"; Karimireddy et al. 2019, "Error Feedback Fixes
// SignSGD", arXiv 1901.09847): compress_with_feedback sends C(x + e) and keeps what was lost,
//   v_k = fl(x_k + e_k);  out = C(v);  e_k ← v_k − D_k
// with v_k − D_k rounded once: fma(−q_k, s, v_k) for int8; exact for bf16 (the dropped low bits;
// it overflows only where v rounds to ±inf) and 0 for none. So Σ_rounds D + e stays Σ_rounds x up
// to the roundings of v and e (a few ulps per round), and a biased compressor's error does not
// accumulate: the mean of what was sent converges to x like 1/rounds.
//
// Adding a decoded vector into floats, decompress_add: out_k ← out_k ⊕ D_k, with ⊕ the exact sum
// rounded once: fma(q_k, s, out_k) for int8 (NOT fl(out_k + fl(q_k·s)): one rounding fewer, and the
// same bits whatever a compiler contracts), fl(out_k + D_k) for bf16 and none.
//
// Sizes are programmer errors (GOSSIP_CHECK): out.size() must equal compressed_bytes(spec, n) when
// compressing, and in.size() must when decompressing (a frame from a peer is checked against
// compressed_bytes() by the caller first, as a peer error). The spec must validate. Spans must not
// overlap, except where a function says so. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <span>

#include "common/enum_names.h"
#include "common/status.h"

namespace gossip::sgd {

enum class CompressionKind { kNone, kBf16, kInt8 };
inline constexpr EnumTable<CompressionKind, 3> kCompressionKinds{
    "compression",
    {{CompressionKind::kNone, "none"},
     {CompressionKind::kBf16, "bf16"},
     {CompressionKind::kInt8, "int8"}}};

// int8's scale block, in floats: a power of two in [kMinBlockFloats, kMaxBlockFloats]. At 16 the
// scales cost 4 bytes per 16 (a 64-byte line of floats); above 65536 a block (256 KiB) no longer
// fits the L2 cache its two passes run in. Powers of two keep ring chunks (ring_allreduce.h) on
// whole cache lines.
inline constexpr std::size_t kMinBlockFloats = 16;
inline constexpr std::size_t kMaxBlockFloats = 65536;

struct CompressionSpec {
  CompressionKind kind = CompressionKind::kNone;
  // int8's scale block; for every kind, the alignment of ring_allreduce.h's chunks.
  std::size_t block_floats = 256;

  // InvalidArgument naming compression.kind or compression.block_floats.
  Status validate() const;
};

// Bytes of compress(spec, n floats): 4n (none), 2n (bf16), n + 4·⌈n / block_floats⌉ (int8).
std::size_t compressed_bytes(const CompressionSpec& spec, std::size_t num_floats);

// Bytes of one gossip message carrying compress(spec, n floats): gossip's transport moves whole
// floats, so compressed_bytes rounded up to a multiple of 4 (int8 and bf16 may end in padding).
std::size_t gossip_message_bytes(const CompressionSpec& spec, std::size_t num_floats);

// out = C(in) in the spec's format.
void compress(const CompressionSpec& spec, std::span<const float> in, std::span<std::byte> out);

// out = D(in); out.size() floats from compressed_bytes(spec, out.size()) bytes.
void decompress(const CompressionSpec& spec, std::span<const std::byte> in, std::span<float> out);

// out ← out ⊕ D(in) (see ⊕ above).
void decompress_add(const CompressionSpec& spec, std::span<const std::byte> in,
                    std::span<float> out);

// Error feedback: v = x + residual; out = C(v); residual ← v − D(out), as stated above. Start the
// residual at zero. With none, out = x + residual and the residual becomes 0.
void compress_with_feedback(const CompressionSpec& spec, std::span<const float> x,
                            std::span<float> residual, std::span<std::byte> out);

}  // namespace gossip::sgd

// The compressors' kernels (sgd/compress.h), one copy per instruction-set level (common/isa.h).
// Private to sgd/: callers use compress.h and choco.h, which pick the level and check sizes.
//
// Every kernel is element-wise IEEE arithmetic with the rounding written out (division, adds,
// explicit std::fma, integer bit operations) plus a maximum over |v| taken on the bit patterns,
// which is exact in any order; so every level writes the same bytes and the same floats.
#pragma once

#include <cstddef>

#include "common/isa.h"

namespace gossip::sgd::cpu {

// What an encoder reads and what it does to its second buffer `y` afterwards, per element, where
// D_k is what the receiver decodes (compress.h states D's rounding):
//   kPlain     v = x                      y unused (may be null)
//   kFeedback  v = x + y  (float add)     y ← v − D   (error feedback's residual)
//   kChoco     v = x − y  (float sub)     y ← y + D   (CHOCO-SGD's public copy)
enum class EncodeMode { kPlain, kFeedback, kChoco };

// encode_int8: the int8 format of compress.h over n floats in blocks of `block_floats` (the last
// block may be shorter), writing compressed_bytes(int8, n) bytes to `out`.
// encode_bf16: the bf16 format, 2n bytes.
// decode_int8 / decode_bf16: out = D (accumulate false) or out ← out ⊕ D (true), per compress.h.
#define GOSSIP_COMPRESS_KERNELS_DECLARE(ns)                                                   \
  namespace ns {                                                                              \
  void encode_int8(EncodeMode mode, const float* x, float* y, std::size_t n,                  \
                   std::size_t block_floats, std::byte* out);                                 \
  void encode_bf16(EncodeMode mode, const float* x, float* y, std::size_t n, std::byte* out); \
  void decode_int8(const std::byte* in, std::size_t n, std::size_t block_floats, float* out,  \
                   bool accumulate);                                                          \
  void decode_bf16(const std::byte* in, std::size_t n, float* out, bool accumulate);          \
  }
GOSSIP_ISA_DECLARE(GOSSIP_COMPRESS_KERNELS_DECLARE)
#undef GOSSIP_COMPRESS_KERNELS_DECLARE

}  // namespace gossip::sgd::cpu

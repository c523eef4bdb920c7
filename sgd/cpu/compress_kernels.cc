// The compressors' kernels (compress_kernels.h), compiled once per instruction-set level
// (common/isa_kernel_begin.h): plain loops that GCC vectorises for the level. Each float result is
// one IEEE operation (division, add, subtract or an explicit std::fma), never a product feeding a
// sum in source — GCC contracts such pairs into an FMA on levels that have one, which would make
// the bits depend on the level. Rounding to an integer is (r + 1.5·2²³) − 1.5·2²³: ties to even
// for |r| < 2²², on every level (no SSE4.1 roundps needed).
#include "sgd/cpu/compress_kernels.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/isa_kernel_begin.h"

namespace gossip::sgd::cpu::GOSSIP_ISA_NS {
namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kInfBits = 0x7f800000u;  // |v|'s bits ≥ this: v is ±inf or NaN
constexpr float kRoundMagic = 12582912.0f;       // 1.5·2²³
constexpr int kQMax = 127;

template <EncodeMode kMode>
inline float value(const float* x, const float* y, std::size_t k) {
  if constexpr (kMode == EncodeMode::kPlain) {
    return x[k];
  } else if constexpr (kMode == EncodeMode::kFeedback) {
    return x[k] + y[k];
  } else {
    return x[k] - y[k];
  }
}

// y's update once v_k was encoded as r·s (r the integer q_k as a float): the residual v − r·s or
// the copy y + r·s, each rounded once (fma).
template <EncodeMode kMode>
inline void update_int8(float* y, std::size_t k, float v, float r, float s) {
  if constexpr (kMode == EncodeMode::kFeedback) {
    y[k] = std::fma(-r, s, v);
  } else if constexpr (kMode == EncodeMode::kChoco) {
    y[k] = std::fma(r, s, y[k]);
  }
}

// max_k |v_k| as the bits of a non-negative float: for those, integer order is float order, and a
// maximum is exact in any summation order (so the vectorised loop gives the same answer). Values
// ≥ kInfBits flag an inf or NaN.
template <EncodeMode kMode>
std::uint32_t max_abs_bits(const float* x, const float* y, std::size_t len) {
  std::uint32_t m = 0;
  for (std::size_t k = 0; k < len; ++k) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(value<kMode>(x, y, k)) & kAbsMask;
    m = b > m ? b : m;
  }
  return m;
}

// Three passes over the block (in cache: at most 256 KiB): max |v|, the q_k, then y's update from
// the q_k written — each a loop GCC vectorises (one fused loop it did not, for some modes).
template <EncodeMode kMode>
void encode_int8_block(const float* x, float* y, std::size_t len, std::byte* out) {
  const std::uint32_t max_bits = max_abs_bits<kMode>(x, y, len);
  const float s = max_bits >= kInfBits ? std::numeric_limits<float>::quiet_NaN()
                                       : std::bit_cast<float>(max_bits) / 127.0f;
  std::memcpy(out, &s, sizeof s);
  auto* q = reinterpret_cast<std::int8_t*>(out + sizeof s);
  if (s > 0) {
    for (std::size_t k = 0; k < len; ++k) {
      // |v/s| ≤ 127·(1 + 2⁻²³) for a normal s and at most ~191 for a subnormal one: the magic
      // rounding is exact there, and the clamp to ±127 is on integers (which GCC vectorises; a
      // float clamp it turned into a conditional add that it does not).
      int qi = static_cast<int>((value<kMode>(x, y, k) / s + kRoundMagic) - kRoundMagic);
      qi = qi < -kQMax ? -kQMax : qi;
      qi = qi > kQMax ? kQMax : qi;
      q[k] = static_cast<std::int8_t>(qi);
    }
  } else {
    // All zero, too small for any scale (max ≤ 127 · 2⁻¹⁵⁰ rounds s to 0), or non-finite
    // (NaN scale): every q is 0, and y's update below uses the s the receiver reads.
    std::memset(q, 0, len);
  }
  if constexpr (kMode != EncodeMode::kPlain) {
    for (std::size_t k = 0; k < len; ++k) {
      update_int8<kMode>(y, k, value<kMode>(x, y, k), static_cast<float>(q[k]), s);
    }
  }
}

template <EncodeMode kMode>
void encode_int8_blocks(const float* x, float* y, std::size_t n, std::size_t block_floats,
                        std::byte* out) {
  for (std::size_t begin = 0; begin < n; begin += block_floats) {
    const std::size_t len = n - begin < block_floats ? n - begin : block_floats;
    encode_int8_block<kMode>(x + begin, y == nullptr ? nullptr : y + begin, len, out);
    out += sizeof(float) + len;
  }
}

template <bool kAccumulate>
void decode_int8_blocks(const std::byte* in, std::size_t n, std::size_t block_floats, float* out) {
  for (std::size_t begin = 0; begin < n; begin += block_floats) {
    const std::size_t len = n - begin < block_floats ? n - begin : block_floats;
    float s;
    std::memcpy(&s, in, sizeof s);
    const auto* q = reinterpret_cast<const std::int8_t*>(in + sizeof s);
    float* o = out + begin;
    for (std::size_t k = 0; k < len; ++k) {
      const auto r = static_cast<float>(q[k]);
      if constexpr (kAccumulate) {
        o[k] = std::fma(r, s, o[k]);
      } else {
        o[k] = r * s;
      }
    }
    in += sizeof s + len;
  }
}

// Round to nearest even on the upper 16 bits; a NaN keeps its sign and top payload bits and is
// made quiet (a NaN whose payload sat in the low half must not round to infinity).
inline std::uint16_t to_bf16(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & kAbsMask) > kInfBits) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

template <EncodeMode kMode>
void encode_bf16_all(const float* x, float* y, std::size_t n, std::byte* out) {
  for (std::size_t k = 0; k < n; ++k) {
    const float v = value<kMode>(x, y, k);
    const std::uint16_t b = to_bf16(v);
    std::memcpy(out + 2 * k, &b, sizeof b);
    // from_bf16(b) is exact, so v − D is exact too (the bits rounding dropped), barring overflow.
    if constexpr (kMode == EncodeMode::kFeedback) {
      y[k] = v - from_bf16(b);
    } else if constexpr (kMode == EncodeMode::kChoco) {
      y[k] = y[k] + from_bf16(b);
    }
  }
}

template <bool kAccumulate>
void decode_bf16_all(const std::byte* in, std::size_t n, float* out) {
  for (std::size_t k = 0; k < n; ++k) {
    std::uint16_t b;
    std::memcpy(&b, in + 2 * k, sizeof b);
    if constexpr (kAccumulate) {
      out[k] = out[k] + from_bf16(b);
    } else {
      out[k] = from_bf16(b);
    }
  }
}

}  // namespace

void encode_int8(EncodeMode mode, const float* x, float* y, std::size_t n, std::size_t block_floats,
                 std::byte* out) {
  switch (mode) {
    case EncodeMode::kPlain:
      return encode_int8_blocks<EncodeMode::kPlain>(x, y, n, block_floats, out);
    case EncodeMode::kFeedback:
      return encode_int8_blocks<EncodeMode::kFeedback>(x, y, n, block_floats, out);
    case EncodeMode::kChoco:
      return encode_int8_blocks<EncodeMode::kChoco>(x, y, n, block_floats, out);
  }
}

void encode_bf16(EncodeMode mode, const float* x, float* y, std::size_t n, std::byte* out) {
  switch (mode) {
    case EncodeMode::kPlain:
      return encode_bf16_all<EncodeMode::kPlain>(x, y, n, out);
    case EncodeMode::kFeedback:
      return encode_bf16_all<EncodeMode::kFeedback>(x, y, n, out);
    case EncodeMode::kChoco:
      return encode_bf16_all<EncodeMode::kChoco>(x, y, n, out);
  }
}

void decode_int8(const std::byte* in, std::size_t n, std::size_t block_floats, float* out,
                 bool accumulate) {
  accumulate ? decode_int8_blocks<true>(in, n, block_floats, out)
             : decode_int8_blocks<false>(in, n, block_floats, out);
}

void decode_bf16(const std::byte* in, std::size_t n, float* out, bool accumulate) {
  accumulate ? decode_bf16_all<true>(in, n, out) : decode_bf16_all<false>(in, n, out);
}

}  // namespace gossip::sgd::cpu::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

// CRC32C with the SSE4.2 instruction, three lanes at a time.
//
// The `crc32` instruction has a latency of 3 cycles and a throughput of 1 per cycle, so a single
// dependency chain runs at a third of the possible rate. We split each 3*kLane block into three
// lanes with independent chains and join them with the linearity of the raw CRC register:
//   raw(s, A || B) = shift_|B|(raw(s, A)) xor raw(0, B)
// where shift_n multiplies by x^(8n) mod P. shift by kLane bytes is a fixed linear map on 32 bits,
// tabulated once (4 x 256 entries) with zlib's GF(2) matrix-squaring method.
#include "net/checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "common/isa.h"

namespace gossip::net {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial
constexpr std::size_t kLane = 8192;          // bytes per lane; a block is 3 lanes

struct Tables {
  std::array<std::uint32_t, 256> byte{};                  // one-byte table for the portable path
  std::array<std::array<std::uint32_t, 256>, 4> shift{};  // x^(8*kLane) mod P, per input byte
};

std::uint32_t gf2_times(const std::uint32_t* mat, std::uint32_t vec) {
  std::uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void gf2_square(std::uint32_t* square, const std::uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

Tables make_tables() {
  Tables t;
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t.byte[i] = c;
  }
  // Operator for one zero bit, squared log2(8 * kLane) times.
  std::uint32_t op[32], sq[32];
  op[0] = kPoly;
  for (int n = 1; n < 32; ++n) op[n] = 1u << (n - 1);
  static_assert((kLane & (kLane - 1)) == 0, "kLane must be a power of two");
  for (std::size_t bits = 1; bits < 8 * kLane; bits *= 2) {
    gf2_square(sq, op);
    std::memcpy(op, sq, sizeof(op));
  }
  for (int k = 0; k < 4; ++k) {
    for (std::uint32_t v = 0; v < 256; ++v) t.shift[k][v] = gf2_times(op, v << (8 * k));
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

std::uint32_t raw_portable(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  const auto& tb = tables().byte;
  for (std::size_t i = 0; i < n; ++i) crc = tb[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
std::uint32_t shift_lane(std::uint32_t crc) {
  const auto& s = tables().shift;
  return s[0][crc & 0xFF] ^ s[1][(crc >> 8) & 0xFF] ^ s[2][(crc >> 16) & 0xFF] ^ s[3][crc >> 24];
}

__attribute__((target("sse4.2"))) std::uint32_t raw_sse42(std::uint32_t crc, const std::uint8_t* p,
                                                          std::size_t n) {
  std::uint64_t c0 = crc;
  while (n >= 3 * kLane) {
    std::uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < kLane; i += 8) {
      std::uint64_t a, b, c;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p + kLane + i, 8);
      std::memcpy(&c, p + 2 * kLane + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, c);
    }
    c0 = shift_lane(static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1);
    c0 = shift_lane(static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c2);
    p += 3 * kLane;
    n -= 3 * kLane;
  }
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t a;
    std::memcpy(&a, p, 8);
    c0 = _mm_crc32_u64(c0, a);
  }
  auto c = static_cast<std::uint32_t>(c0);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

// The SSE4.2 instruction where the CPU has it, unless GOSSIP_CPU forced the portable level on a
// CPU that has a better one (common/isa.h: the portable paths stay testable on any machine). Both
// give the same CRC.
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2") &&
                          !(active_isa() == Isa::kPortable && detected_isa() != Isa::kPortable);
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c_portable(const void* data, std::size_t num_bytes, std::uint32_t crc) {
  return ~raw_portable(~crc, static_cast<const std::uint8_t*>(data), num_bytes);
}

std::uint32_t crc32c(const void* data, std::size_t num_bytes, std::uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return ~raw_sse42(~crc, static_cast<const std::uint8_t*>(data), num_bytes);
#endif
  return crc32c_portable(data, num_bytes, crc);
}

bool crc32c_hardware() {
#if defined(__x86_64__)
  return have_sse42();
#else
  return false;
#endif
}

}  // namespace gossip::net

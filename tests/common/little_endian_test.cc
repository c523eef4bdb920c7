// The little-endian codec (common/little_endian.h) against bytes written out by hand, at every
// offset of a buffer (unaligned), on every byte type, and against the host's own representation
// where the host is little-endian; float32 by its IEEE-754 bit patterns (signed zero, infinity, a
// NaN's payload).
#include "common/little_endian.h"

#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/random.h"

namespace gossip {
namespace {

TEST_CASE("integers are written least significant byte first") {
  std::array<unsigned char, 8> b{};
  put_u16(b.data(), 0x1122);
  CHECK(b[0] == 0x22);
  CHECK(b[1] == 0x11);
  put_u32(b.data(), 0x11223344u);
  CHECK(std::vector<int>(b.begin(), b.begin() + 4) == std::vector<int>{0x44, 0x33, 0x22, 0x11});
  put_u64(b.data(), 0x0102030405060708ull);
  CHECK(std::vector<int>(b.begin(), b.end()) ==
        std::vector<int>{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01});
  // The high bit of every byte survives (no sign extension through char).
  const char high[8] = {'\xff', '\xfe', '\x80', '\x7f', '\x00', '\x81', '\xc0', '\xee'};
  CHECK(get_u16(high) == 0xfeffu);
  CHECK(get_u32(high) == 0x7f80feffu);
  CHECK(get_u64(high) == 0xeec081007f80feffull);
}

TEST_CASE("float32 is its IEEE-754 bits, little-endian") {
  std::byte b[4];
  put_f32(b, 1.0f);  // 0x3f800000
  CHECK(std::to_integer<int>(b[0]) == 0x00);
  CHECK(std::to_integer<int>(b[1]) == 0x00);
  CHECK(std::to_integer<int>(b[2]) == 0x80);
  CHECK(std::to_integer<int>(b[3]) == 0x3f);
  put_f32(b, -0.0f);
  CHECK(get_u32(b) == 0x80000000u);
  CHECK(std::signbit(get_f32(b)));
  put_f32(b, -std::numeric_limits<float>::infinity());
  CHECK(get_u32(b) == 0xff800000u);
  // A NaN keeps its payload: the codec moves bits, it does no arithmetic.
  put_u32(b, 0x7fc01234u);
  CHECK(std::isnan(get_f32(b)));
  put_f32(b, get_f32(b));
  CHECK(get_u32(b) == 0x7fc01234u);
  put_f32(b, 0.1f);
  CHECK(get_f32(b) == 0.1f);
}

TEST_CASE("round trips at every offset, on every byte type, and the host's bytes") {
  Rng rng(7);
  std::array<char, 24> c{};
  std::array<std::uint8_t, 24> u{};
  std::array<std::byte, 24> y{};
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t v = rng.next_u64();
    for (std::size_t at = 0; at + 8 <= c.size(); ++at) {
      CAPTURE(at);
      put_u64(c.data() + at, v);
      put_u64(u.data() + at, v);
      put_u64(y.data() + at, v);
      CHECK(get_u64(c.data() + at) == v);
      CHECK(std::memcmp(c.data() + at, u.data() + at, 8) == 0);
      CHECK(std::memcmp(c.data() + at, y.data() + at, 8) == 0);
      put_u32(c.data() + at, static_cast<std::uint32_t>(v));
      CHECK(get_u32(u.data() + at) == static_cast<std::uint32_t>(v));  // the low half of v
      CHECK(get_u32(c.data() + at) == static_cast<std::uint32_t>(v));
      put_u16(y.data() + at, static_cast<std::uint16_t>(v >> 48));
      CHECK(get_u16(y.data() + at) == static_cast<std::uint16_t>(v >> 48));
      if constexpr (std::endian::native == std::endian::little) {
        std::uint64_t host = 0;
        std::memcpy(&host, u.data() + at, 8);
        CHECK(host == v);
      }
    }
  }
}

}  // namespace
}  // namespace gossip

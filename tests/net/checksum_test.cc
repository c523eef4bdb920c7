// CRC32C: the standard check value, and the three-lane SSE4.2 path against the portable table
// at every length and alignment around the lane boundaries.
#include "net/checksum.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace gossip::net {

TEST_CASE("crc32c matches the published check value") {
  const std::string s = "123456789";
  CHECK(crc32c(s.data(), s.size()) == 0xE3069283u);
  CHECK(crc32c_portable(s.data(), s.size()) == 0xE3069283u);
  CHECK(crc32c(s.data(), 0) == 0u);
}

TEST_CASE("crc32c fast path equals the portable table on every length and offset") {
  std::vector<std::uint8_t> data(3 * 8192 * 3 + 77);
  std::uint32_t x = 12345;
  for (auto& b : data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  for (std::size_t len :
       {0ul, 1ul, 7ul, 8ul, 9ul, 24575ul, 24576ul, 24577ul, 49152ul + 13, data.size() - 5}) {
    for (std::size_t off : {0ul, 1ul, 3ul, 5ul}) {
      if (off + len > data.size()) continue;
      CAPTURE(len);
      CAPTURE(off);
      CHECK(crc32c(data.data() + off, len) == crc32c_portable(data.data() + off, len));
    }
  }
}

TEST_CASE("crc32c continues across pieces and detects a flipped bit") {
  std::vector<std::uint8_t> data(100000, 0xAB);
  const std::uint32_t whole = crc32c(data.data(), data.size());
  const std::uint32_t a = crc32c(data.data(), 30000);
  CHECK(crc32c(data.data() + 30000, data.size() - 30000, a) == whole);
  data[54321] ^= 0x10;
  CHECK(crc32c(data.data(), data.size()) != whole);
}

}  // namespace gossip::net

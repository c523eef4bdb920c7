// Units: every spelling of a bandwidth (bits and bytes), duration, size and count against the
// value it names, and the errors that name the text and the units that would have been accepted.
#include "common/units.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

namespace gossip {
namespace {

TEST_CASE("bandwidth in bits and in bytes per second, both spellings") {
  // Bits: "bps" and "bit/s" and "b/s", any case of the prefix and the suffix.
  CHECK(*parse_bandwidth_bps("1Gbps") == 1e9);
  CHECK(*parse_bandwidth_bps("1 gbps") == 1e9);
  CHECK(*parse_bandwidth_bps("1GBPS") == 1e9);
  CHECK(*parse_bandwidth_bps("100Mbit/s") == 1e8);
  CHECK(*parse_bandwidth_bps("100 Mb/s") == 1e8);
  CHECK(*parse_bandwidth_bps("2.5 Gbit/s") == 2.5e9);
  CHECK(*parse_bandwidth_bps("10kbps") == 1e4);
  CHECK(*parse_bandwidth_bps("1Tbps") == 1e12);
  CHECK(*parse_bandwidth_bps("1e6") == 1e6);  // a bare number is bits/s
  // Bytes: a capital B before "/s"; 12.5 MB/s is 100 Mbit/s, 125 MB/s is 1 Gbit/s.
  CHECK(*parse_bandwidth_bps("12.5MB/s") == *parse_bandwidth_bps("100Mbit/s"));
  CHECK(*parse_bandwidth_bps("125 MB/s") == *parse_bandwidth_bps("1Gbps"));
  CHECK(*parse_bandwidth_bps("1B/s") == 8);
  CHECK(*parse_bandwidth_bps("1KB/s") == 8e3);
  CHECK(*parse_bandwidth_bps("1GB/s") == 8e9);
  CHECK(*parse_bandwidth_bps("1MiB/s") == 8.0 * 1024 * 1024);
  // "MB/s" is bytes and "Mb/s" bits: a factor of 8.
  CHECK(*parse_bandwidth_bps("1MB/s") == 8 * *parse_bandwidth_bps("1Mb/s"));
}

TEST_CASE("bandwidth errors") {
  for (const char* bad : {"fast", "1 GB", "0Gbps", "0", "-1Gbps", "1 parsec/s", "", "Gbps", "inf",
                          "nanMbps", "1mB/s"}) {
    CAPTURE(bad);
    CHECK(!parse_bandwidth_bps(bad).is_ok());
  }
  const auto bad = parse_bandwidth_bps("7 parsecs");
  CHECK(bad.status().message().find("'7 parsecs': unknown unit") != std::string::npos);
  CHECK(bad.status().message().find("MB/s") != std::string::npos);
}

TEST_CASE("durations, sizes and counts") {
  CHECK(*parse_duration_s("1ms") == doctest::Approx(1e-3));
  CHECK(*parse_duration_s("50us") == doctest::Approx(5e-5));
  CHECK(*parse_duration_s("3ns") == doctest::Approx(3e-9));
  CHECK(*parse_duration_s("2") == 2.0);
  CHECK(*parse_duration_s(" 0.5 s ") == 0.5);
  CHECK(!parse_duration_s("-1ms").is_ok());
  CHECK(!parse_duration_s("1 fortnight").is_ok());
  CHECK(!parse_duration_s("1MB").is_ok());

  CHECK(*parse_size_bytes("4MB") == 4e6);
  CHECK(*parse_size_bytes("100MiB") == 100.0 * 1048576);
  CHECK(*parse_size_bytes("512KB") == 512e3);
  CHECK(*parse_size_bytes("1e6") == 1e6);
  CHECK(!parse_size_bytes("1Gbps").is_ok());
  CHECK(!parse_size_bytes("4 Mb").is_ok());  // bits are not a size here

  CHECK(*parse_count("25M") == 25e6);
  CHECK(*parse_count("1.5k") == 1500);
  CHECK(*parse_count("2G") == 2e9);
  CHECK(*parse_count("100000") == 1e5);
  CHECK(!parse_count("3 dozen").is_ok());

  CHECK(*parse_number(" 0.25 ") == 0.25);
  CHECK(!parse_number("0.25x").is_ok());
  CHECK(!parse_number("-1").is_ok());
}

}  // namespace
}  // namespace gossip

namespace gossip {

TEST_CASE(
    "format_*: the value in the largest unit that keeps it >= 1, and the parser reads it back") {
  CHECK(format_duration_s(0.0012) == "1.2 ms");
  CHECK(format_duration_s(65) == "65 s");
  CHECK(format_duration_s(3.5e-8) == "35 ns");
  CHECK(format_duration_s(0) == "0 s");
  CHECK(format_size_bytes(4e6) == "4 MB");
  CHECK(format_size_bytes(84) == "84 B");
  CHECK(format_size_bytes(9.4e5) == "940 kB");
  CHECK(format_bandwidth_bps(1e9) == "1 Gbit/s");
  CHECK(format_bandwidth_bps(1.25e8) == "125 Mbit/s");
  CHECK(format_duration_s(std::nan("")) == "n/a");
  // Round trip to 4 significant digits over 12 decades, through the parsers users type into.
  for (double v = 1.2345e-9; v < 1e4; v *= 3.7) {
    CAPTURE(v);
    const auto d = parse_duration_s(format_duration_s(v));
    REQUIRE(d.is_ok());
    CHECK(*d == doctest::Approx(v).epsilon(5e-4));
  }
  for (double v = 1.2345; v < 1e14; v *= 3.7) {
    CAPTURE(v);
    const auto b = parse_size_bytes(format_size_bytes(v));
    REQUIRE(b.is_ok());
    CHECK(*b == doctest::Approx(v).epsilon(5e-4));
    const auto r = parse_bandwidth_bps(format_bandwidth_bps(v));
    REQUIRE(r.is_ok());
    CHECK(*r == doctest::Approx(v).epsilon(5e-4));
  }
}

}  // namespace gossip

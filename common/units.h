// Quantities with units, as users type them on command lines and in sweep values: one parser for
// every tool, so "1Gbps" means the same to gossip-topo and gossip-sim.
//
//   bandwidth  bits per second:  "1Gbps", "100Mbit/s", "10 Mb/s", "2.5e9" (a bare number is bits/s)
//              bytes per second: "12.5MB/s", "125 KB/s", "1GiB/s" (a capital B before "/s")
//              SI prefixes k, M, G, T (any case for bits); Ki, Mi, Gi for bytes.
//   duration   seconds: "1ms", "50us", "2ns", "0.5s", "0.001" (a bare number is seconds)
//   size       bytes: "4MB", "100MiB", "512KB", "1e6" (a bare number is bytes)
//   count      "25M", "1.5k", "2G", "100000"
//
// All return the value in the base unit (bits/s, seconds, bytes, ones), finite and >= 0, or
// InvalidArgument naming the text and the units that would have been accepted. Pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gossip {

// Bits per second, > 0.
Result<double> parse_bandwidth_bps(std::string_view text);
Result<double> parse_duration_s(std::string_view text);
Result<double> parse_size_bytes(std::string_view text);
Result<double> parse_count(std::string_view text);
// A plain number without a unit, finite and >= 0.
Result<double> parse_number(std::string_view text);

// The inverses, for output: the value with 4 significant digits and the largest unit of the
// parsers' tables that keeps it >= 1 (decimal prefixes), so that every time, size and bandwidth a
// tool prints carries its unit and reads back through the parser above to 4 digits:
//   format_duration_s(0.0012) = "1.2 ms"    format_size_bytes(4e6) = "4 MB"
//   format_bandwidth_bps(1e9) = "1 Gbit/s"  (NaN: "n/a"; infinities: "inf s", ...)
std::string format_duration_s(double seconds);
std::string format_size_bytes(double bytes);
std::string format_bandwidth_bps(double bits_per_second);

}  // namespace gossip

// Unit parsing: a number (std::from_chars, locale-independent) followed by a unit from a table.
#include "common/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/strings.h"

namespace gossip {
namespace {

struct Unit {
  std::string_view name;
  double scale;
};

// Bits per second, matched without regard to case ("Gbps", "GBPS" and "gbit/s" alike), after the
// bytes below: "MB/s" is bytes, "Mb/s" bits.
constexpr Unit kBitRates[] = {
    {"", 1},       {"bps", 1},     {"bit/s", 1},     {"b/s", 1},     {"kbps", 1e3}, {"kbit/s", 1e3},
    {"kb/s", 1e3}, {"mbps", 1e6},  {"mbit/s", 1e6},  {"mb/s", 1e6},  {"gbps", 1e9}, {"gbit/s", 1e9},
    {"gb/s", 1e9}, {"tbps", 1e12}, {"tbit/s", 1e12}, {"tb/s", 1e12},
};
// Bytes per second, matched exactly (the capital B is what makes them bytes).
constexpr Unit kByteRates[] = {
    {"B/s", 8},
    {"kB/s", 8e3},
    {"KB/s", 8e3},
    {"MB/s", 8e6},
    {"GB/s", 8e9},
    {"TB/s", 8e12},
    {"KiB/s", 8 * 1024.0},
    {"MiB/s", 8 * 1048576.0},
    {"GiB/s", 8 * 1073741824.0},
};
constexpr Unit kDurations[] = {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
constexpr Unit kSizes[] = {
    {"", 1},     {"B", 1},     {"kB", 1e3},     {"KB", 1e3},        {"MB", 1e6},
    {"GB", 1e9}, {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
};
// Counts, matched without regard to case ("1.5k", "25M"); "B" is billions.
constexpr Unit kCounts[] = {{"", 1}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1e9}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Splits "2.5Gbps" into 2.5 and "Gbps" (the unit trimmed, its case kept).
Result<std::pair<double, std::string_view>> number_and_unit(std::string_view text) {
  text = trim(text);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) {
    return invalid_argument("expected a number, got '" + std::string(text) + "'");
  }
  if (!std::isfinite(value) || value < 0) {
    return invalid_argument("expected a finite non-negative number, got '" + std::string(text) +
                            "'");
  }
  return std::pair{value, trim(std::string_view(ptr, text.data() + text.size() - ptr))};
}

template <std::size_t N>
const Unit* find(const Unit (&table)[N], std::string_view name) {
  for (const Unit& u : table) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

// The number in `text` times the scale of its unit from `table` (matched exactly, or without
// regard to case); InvalidArgument "<what> '<text>': <unknown>" for a unit not in the table.
template <std::size_t N>
Result<double> scaled(std::string_view text, const Unit (&table)[N], bool ignore_case,
                      std::string_view what, std::string_view unknown) {
  GOSSIP_ASSIGN_OR_RETURN(const auto nu, number_and_unit(text));
  const Unit* u = find(table, ignore_case ? lower(nu.second) : std::string(nu.second));
  if (u == nullptr) {
    return invalid_argument(std::string(what) + " '" + std::string(text) +
                            "': " + std::string(unknown));
  }
  return nu.first * u->scale;
}

}  // namespace

Result<double> parse_bandwidth_bps(std::string_view text) {
  GOSSIP_ASSIGN_OR_RETURN(const auto nu, number_and_unit(text));
  const Unit* u = find(kByteRates, nu.second);
  // A capital B before "/s" is bytes, never bits ("mB/s" is not "Mb/s").
  if (u == nullptr && !nu.second.ends_with("B/s")) u = find(kBitRates, lower(nu.second));
  if (u == nullptr) {
    return invalid_argument("bandwidth '" + std::string(text) +
                            "': unknown unit; use bits per second (bps, Kbps, Mbps, Gbps, Tbps; "
                            "also Mbit/s, Mb/s) or bytes per second (B/s, KB/s, MB/s, GB/s, "
                            "MiB/s, ...)");
  }
  const double bps = nu.first * u->scale;
  if (!(bps > 0) || !std::isfinite(bps)) {
    return invalid_argument("bandwidth '" + std::string(text) + "' must be > 0");
  }
  return bps;
}

Result<double> parse_duration_s(std::string_view text) {
  return scaled(text, kDurations, false, "duration", "unknown unit; use s, ms, us or ns");
}

Result<double> parse_size_bytes(std::string_view text) {
  return scaled(text, kSizes, false, "size",
                "unknown unit; use B, KB, MB, GB, TB, KiB, MiB or GiB (bytes)");
}

Result<double> parse_count(std::string_view text) {
  return scaled(text, kCounts, true, "count", "unknown suffix; use k, M or G");
}

Result<double> parse_number(std::string_view text) {
  GOSSIP_ASSIGN_OR_RETURN(const auto nu, number_and_unit(text));
  if (!nu.second.empty()) {
    return invalid_argument("expected a plain number, got '" + std::string(text) + "'");
  }
  return nu.first;
}

namespace {

// `value` in the largest of `units` (ascending scale) that keeps it >= 1, %.4g.
std::string with_unit(double value, std::initializer_list<Unit> units) {
  if (std::isnan(value)) return "n/a";
  const Unit* pick = units.begin();
  for (const Unit& u : units) {
    if (value == 0 ? u.scale == 1 : std::fabs(value) >= u.scale) pick = &u;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.4g %s", value / pick->scale, std::string(pick->name).c_str());
  return buf;
}

}  // namespace

std::string format_duration_s(double seconds) {
  return with_unit(seconds, {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}});
}

std::string format_size_bytes(double bytes) {
  return with_unit(bytes, {{"B", 1}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}});
}

std::string format_bandwidth_bps(double bits_per_second) {
  return with_unit(
      bits_per_second,
      {{"bit/s", 1}, {"kbit/s", 1e3}, {"Mbit/s", 1e6}, {"Gbit/s", 1e9}, {"Tbit/s", 1e12}});
}

}  // namespace gossip

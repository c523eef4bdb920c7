// One table per enum: the names a user types for its values, from which both directions come.
//
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kGreen, "green"},
//                                             {Color::kRed, "crimson"}};  // an alias
//   enum_name(kColorNames, Color::kRed)           -> "red" (a value's first entry)
//   parse_enum(kColorNames, "crimson", "color")  -> Color::kRed
//   parse_enum(kColorNames, "blue", "color")     -> InvalidArgument
//                                                   "color 'blue': expected red or green"
//
// The first entry of a value is its name (printed, written to files); later entries of the same
// value are aliases, accepted but not listed. Matching is exact (case-sensitive). Header-only,
// constexpr tables, no state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gossip {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value`: its first entry in `names`, or `unnamed` when it has none.
template <typename E, std::size_t N>
constexpr std::string_view enum_name(const EnumName<E> (&names)[N], E value,
                                     std::string_view unnamed = "?") {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return unnamed;
}

// "a, b or c": the name of every value, in table order (aliases left out).
template <typename E, std::size_t N>
std::string enum_choices(const EnumName<E> (&names)[N]) {
  std::string out;
  std::size_t listed = 0, total = 0;
  for (std::size_t i = 0; i < N; ++i) total += enum_name(names, names[i].value) == names[i].name;
  for (std::size_t i = 0; i < N; ++i) {
    if (enum_name(names, names[i].value) != names[i].name) continue;
    if (listed > 0) out += listed + 1 == total ? " or " : ", ";
    out += names[i].name;
    ++listed;
  }
  return out;
}

// The value named `text` (a name or an alias); InvalidArgument "<what> '<text>': expected ..."
// listing the names otherwise.
template <typename E, std::size_t N>
Result<E> parse_enum(const EnumName<E> (&names)[N], std::string_view text, std::string_view what) {
  for (const EnumName<E>& n : names) {
    if (n.name == text) return n.value;
  }
  return invalid_argument(std::string(what) + " '" + std::string(text) + "': expected " +
                          enum_choices(names));
}

// An enum's table together with what a user calls the enum, so that one object (declared next to
// the enum, in its header) names, parses and lists its values:
//
//   inline constexpr EnumTable<Color, 3> kColors{
//       "color", {{Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kRed, "crimson"}}};
//   kColors.name(Color::kRed) -> "red";  kColors.parse("blue") -> InvalidArgument
//                                        "color 'blue': expected red or green"
template <typename E, std::size_t N>
struct EnumTable {
  std::string_view what;
  EnumName<E> names[N];

  constexpr std::string_view name(E value) const { return enum_name(names, value); }
  Result<E> parse(std::string_view text) const { return parse_enum(names, text, what); }
  std::string choices() const { return enum_choices(names); }
};

}  // namespace gossip

// Enum tables: names both ways, aliases accepted but not listed, and the error's list; the same
// through an EnumTable.
#include "common/enum_names.h"

#include <doctest/doctest.h>

namespace gossip {
namespace {

enum class Color { kRed, kGreen, kBlue, kUnnamed };
constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"},
                                           {Color::kGreen, "green"},
                                           {Color::kBlue, "blue"},
                                           {Color::kRed, "crimson"}};

TEST_CASE("a table gives names, values and aliases") {
  CHECK(enum_name(kColorNames, Color::kRed) == "red");  // the first entry, not the alias
  CHECK(enum_name(kColorNames, Color::kBlue) == "blue");
  CHECK(enum_name(kColorNames, Color::kUnnamed) == "?");
  for (Color c : {Color::kRed, Color::kGreen, Color::kBlue}) {
    CHECK(*parse_enum(kColorNames, enum_name(kColorNames, c), "color") == c);  // round trip
  }
  CHECK(*parse_enum(kColorNames, "crimson", "color") == Color::kRed);
  CHECK(enum_choices(kColorNames) == "red, green or blue");
  const auto bad = parse_enum(kColorNames, "Red", "color");  // case matters
  REQUIRE(!bad.is_ok());
  CHECK(bad.status().message() == "color 'Red': expected red, green or blue");
}

// The same table with the enum's user-facing name, as an EnumTable (the sgd enums' form).
constexpr EnumTable<Color, 4> kColors{"color",
                                      {{Color::kRed, "red"},
                                       {Color::kGreen, "green"},
                                       {Color::kBlue, "blue"},
                                       {Color::kRed, "crimson"}}};
static_assert(kColors.name(Color::kGreen) == "green");  // usable at compile time

TEST_CASE("an EnumTable names, parses and lists like its table, with its own 'what'") {
  for (Color c : {Color::kRed, Color::kGreen, Color::kBlue, Color::kUnnamed}) {
    CHECK(kColors.name(c) == enum_name(kColorNames, c));
  }
  CHECK(*kColors.parse("crimson") == Color::kRed);
  CHECK(*kColors.parse("blue") == Color::kBlue);
  CHECK(kColors.choices() == "red, green or blue");
  const auto bad = kColors.parse("purple");
  REQUIRE(!bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message() == "color 'purple': expected red, green or blue");
}

}  // namespace
}  // namespace gossip

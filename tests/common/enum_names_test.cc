// Enum tables: names both ways, aliases accepted but not listed, and the error's list.
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

}  // namespace
}  // namespace gossip

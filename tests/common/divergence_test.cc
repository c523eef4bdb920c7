// all_finite against std::isfinite on every kind of float: the exponent-bit test must call
// exactly NaN (quiet and signalling, any sign and payload) and ±Inf non-finite, at any position of
// a long vector (the vectorised loop's head, body and tail).
#include "common/divergence.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace gossip {
namespace {

TEST_CASE("all_finite agrees with std::isfinite on every class of float, anywhere in a vector") {
  using L = std::numeric_limits<float>;
  const float specials[] = {0.0f,
                            -0.0f,
                            L::denorm_min(),
                            -L::denorm_min(),
                            L::min(),
                            L::max(),
                            -L::max(),
                            L::infinity(),
                            -L::infinity(),
                            L::quiet_NaN(),
                            -L::quiet_NaN(),
                            L::signaling_NaN(),
                            std::bit_cast<float>(0x7f800001u),
                            std::bit_cast<float>(0xffc12345u)};
  CHECK(all_finite({}));
  for (const std::size_t n : {1u, 7u, 64u, 1001u}) {
    for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      for (const float v : specials) {
        std::vector<float> x(n, 1.5f);
        x[at] = v;
        CAPTURE(n);
        CAPTURE(at);
        CAPTURE(std::bit_cast<std::uint32_t>(v));
        CHECK(all_finite(x) == static_cast<bool>(std::isfinite(v)));
      }
    }
  }
}

}  // namespace
}  // namespace gossip

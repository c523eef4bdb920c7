// The node-local consensus-distance estimate (algorithms/neighbourhood.h, distance_to_mean_sq):
// closed forms when every coordinate is read, and the strided estimate against its definition.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "algorithms/neighbourhood.h"

namespace gossip::algorithms {
namespace {

using Span = std::span<const float>;

TEST_CASE("exact: ||x - mean of the others||^2 in closed form") {
  const std::vector<float> x(10, 3.0f), zeros(10, 0.0f), twos(10, 2.0f), ones(10, 1.0f);
  // mean(0, 2) = 1: each coordinate differs by 2 -> 10 * 4.
  const std::vector<Span> others = {zeros, twos};
  CHECK(distance_to_mean_sq(x, others, 1 << 16) == 40.0);
  const std::vector<Span> same = {x};
  CHECK(distance_to_mean_sq(x, same, 1 << 16) == 0.0);
  // x_k = k, the neighbours' mean 0 -> sum k^2 = (d-1) d (2d-1) / 6.
  std::vector<float> ramp(100);
  for (int k = 0; k < 100; ++k) ramp[k] = static_cast<float>(k);
  const std::vector<float> zero100(100, 0.0f);
  const std::vector<Span> z = {zero100};
  CHECK(distance_to_mean_sq(ramp, z, 1 << 16) == 99.0 * 100 * 199 / 6);
  CHECK(distance_to_mean_sq(ramp, {}, 1 << 16) == 0.0);  // no neighbours: nothing to compare
}

TEST_CASE("strided: every s-th coordinate, scaled by d / read") {
  const std::size_t d = 1000;
  std::vector<float> x(d), zero(d, 0.0f);
  for (std::size_t k = 0; k < d; ++k) x[k] = static_cast<float>(k % 7);
  const std::vector<Span> z = {zero};
  // max 300 -> stride 4 -> coordinates 0, 4, ..., 996 (250 of them).
  double want = 0;
  for (std::size_t k = 0; k < d; k += 4) want += double(x[k]) * x[k];
  want *= 1000.0 / 250.0;
  CHECK(distance_to_mean_sq(x, z, 300) == doctest::Approx(want).epsilon(1e-12));
  // A constant difference is estimated exactly whatever the stride.
  const std::vector<float> c(d, 0.5f);
  CHECK(distance_to_mean_sq(c, z, 7) == doctest::Approx(250.0).epsilon(1e-12));
}

}  // namespace
}  // namespace gossip::algorithms

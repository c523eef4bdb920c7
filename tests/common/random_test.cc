// Rng: reproducibility, stream independence, and distribution moments against closed forms.
#include "common/random.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace gossip {
namespace {

TEST_CASE("same seed and stream give the same sequence, others differ") {
  Rng a(42, 3), b(42, 3), c(42, 4), d(43, 3);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto x = a.next_u64();
    CHECK(x == b.next_u64());
    same_c += x == c.next_u64();
    same_d += x == d.next_u64();
  }
  CHECK(same_c == 0);
  CHECK(same_d == 0);
}

TEST_CASE("state round-trips") {
  Rng a(7);
  for (int i = 0; i < 10; ++i) a.next_u64();
  Rng b(999);
  b.set_state(a.state());
  for (int i = 0; i < 100; ++i) CHECK(a.normal() == b.normal());
}

TEST_CASE("uniform, normal and gamma moments match their closed forms") {
  Rng r(1);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0, sg = 0, sg2 = 0, sh = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    su += u;
    su2 += u * u;
    const double z = r.normal();
    sn += z;
    sn2 += z * z;
    const double g = r.gamma(2.5);
    sg += g;
    sg2 += g * g;
    sh += r.gamma(0.3);
  }
  // Standard errors at n = 2e5 are ~0.0007 (uniform), ~0.002 (normal), ~0.004 (gamma): 5 sigma.
  CHECK(su / n == doctest::Approx(0.5).epsilon(0.01));
  CHECK(su2 / n - (su / n) * (su / n) == doctest::Approx(1.0 / 12).epsilon(0.01));
  CHECK(std::abs(sn / n) < 0.012);
  CHECK(sn2 / n == doctest::Approx(1.0).epsilon(0.015));
  CHECK(sg / n == doctest::Approx(2.5).epsilon(0.01));
  CHECK(sg2 / n - (sg / n) * (sg / n) == doctest::Approx(2.5).epsilon(0.03));
  CHECK(sh / n == doctest::Approx(0.3).epsilon(0.02));
}

TEST_CASE("uniform_int is unbiased (chi-square over 7 buckets)") {
  Rng r(5);
  const int k = 7, n = 70000;
  std::vector<int> counts(k, 0);
  for (int i = 0; i < n; ++i) counts[r.uniform_int(k)]++;
  double chi2 = 0;
  for (int c : counts) chi2 += (c - n / k) * double(c - n / k) / (n / k);
  CHECK(chi2 < 22.46);  // 99.9th percentile of chi-square with 6 degrees of freedom
}

TEST_CASE("shuffle is a permutation") {
  Rng r(9);
  std::vector<int> v(100);
  for (int i = 0; i < 100; ++i) v[i] = i;
  r.shuffle(std::span<int>(v));
  std::vector<int> seen(100, 0);
  for (int x : v) seen[x]++;
  for (int s : seen) CHECK(s == 1);
  bool moved = false;
  for (int i = 0; i < 100; ++i) moved |= v[i] != i;
  CHECK(moved);
}

}  // namespace
}  // namespace gossip

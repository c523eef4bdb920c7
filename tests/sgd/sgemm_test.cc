// sgd/cpu/sgemm.h: the float GEMM of the cpu backend's dense networks, checked against a double
// product of the same float inputs (error within the k·ε·Σ|a||b| bound of a float dot product),
// and the rounding properties its header states: each entry is one fused-multiply-add chain over
// k, so it does not depend on which tile, panel or block the entry falls in.
#include "sgd/cpu/sgemm.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/isa.h"
#include "common/random.h"

namespace gossip::sgd::cpu {
namespace {

struct Operand {
  std::vector<float> v;
  int rows = 0, cols = 0;  // stored column-major with leading dimension `rows`
  float at(int i, int j) const { return v[static_cast<std::size_t>(j) * rows + i]; }
};

Operand random_operand(int rows, int cols, std::uint64_t seed) {
  Rng rng(seed);
  Operand o{std::vector<float>(static_cast<std::size_t>(rows) * cols), rows, cols};
  for (float& x : o.v) x = static_cast<float>(rng.normal());
  return o;
}

// op(A)·op(B) into C (m×n), then every entry against the double product with its own bound.
void check_product(bool ta, bool tb, int m, int n, int k, std::uint64_t seed) {
  CAPTURE(ta);
  CAPTURE(tb);
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  const Operand a = ta ? random_operand(k, m, seed) : random_operand(m, k, seed);
  const Operand b = tb ? random_operand(n, k, seed + 1) : random_operand(k, n, seed + 1);
  std::vector<float> c(static_cast<std::size_t>(m) * n, std::nanf(""));
  sgemm(ta, tb, m, n, k, a.v.data(), a.rows, b.v.data(), b.rows, c.data(), m);
  int bad = 0;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double exact = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        const double x = ta ? a.at(p, i) : a.at(i, p);
        const double y = tb ? b.at(j, p) : b.at(p, j);
        exact += x * y;
        magnitude += std::abs(x * y);
      }
      const double got = c[static_cast<std::size_t>(j) * m + i];
      const double bound = (k + 2) * 0x1p-24 * magnitude + 1e-30;
      if (!(std::abs(got - exact) <= bound)) ++bad;
    }
  }
  CHECK(bad == 0);
}

struct Shape {
  int m, n, k;
};
// Full tiles, partial tiles in m (32) and n (12), k across the 384 block, the MLP's shapes.
constexpr Shape kShapes[] = {{32, 12, 5},     {1, 1, 1},      {33, 13, 7},
                             {64, 24, 384},   {70, 29, 385},  {129, 11, 800},
                             {256, 128, 100}, {10, 128, 128}, {5, 3, 1000}};

TEST_CASE("sgemm: every transpose case and edge shape agrees with the double product") {
  std::uint64_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const Shape& s : kShapes) check_product(ta, tb, s.m, s.n, s.k, seed++);
    }
  }
}

TEST_CASE("sgemm: k = 0 gives zeros, and C's leading dimension is honoured") {
  std::vector<float> c(6, 7.0f);
  sgemm(false, false, 2, 3, 0, nullptr, 2, nullptr, 1, c.data(), 2);
  for (float x : c) CHECK(x == 0.0f);
  // C inside a larger buffer (ldc = 5): the rows outside the 3×2 block stay untouched.
  const Operand a = random_operand(3, 4, 9), b = random_operand(4, 2, 10);
  std::vector<float> big(10, -1.0f), tight(6);
  sgemm(false, false, 3, 2, 4, a.v.data(), 3, b.v.data(), 4, big.data(), 5);
  sgemm(false, false, 3, 2, 4, a.v.data(), 3, b.v.data(), 4, tight.data(), 3);
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < 3; ++i) CHECK(big[j * 5 + i] == tight[j * 3 + i]);
    CHECK(big[j * 5 + 3] == -1.0f);
    CHECK(big[j * 5 + 4] == -1.0f);
  }
}

TEST_CASE("sgemm: an entry's bits do not depend on the tile it falls in") {
  // Column block [5, 5+7) of B computed alone (a partial panel, other neighbours) must give the
  // same bits as inside the full product; likewise rows [3, 3+40) of A.
  const int m = 100, n = 40, k = 900;
  const Operand a = random_operand(m, k, 21), b = random_operand(k, n, 22);
  std::vector<float> full(static_cast<std::size_t>(m) * n);
  sgemm(false, false, m, n, k, a.v.data(), m, b.v.data(), k, full.data(), m);
  std::vector<float> cols(static_cast<std::size_t>(m) * 7);
  sgemm(false, false, m, 7, k, a.v.data(), m, b.v.data() + 5 * k, k, cols.data(), m);
  CHECK(std::memcmp(cols.data(), full.data() + 5 * m, cols.size() * sizeof(float)) == 0);
  std::vector<float> rows(static_cast<std::size_t>(40) * n);
  sgemm(false, false, 40, n, k, a.v.data() + 3, m, b.v.data(), k, rows.data(), 40);
  int differ = 0;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < 40; ++i) differ += rows[j * 40 + i] != full[j * m + 3 + i];
  }
  CHECK(differ == 0);
}

// The rounding sgemm.h states, as plain scalar operations: per entry, a fused multiply-add chain
// over each block of 384 k values from zero, each block's sum added to the entry.
std::vector<float> contract_product(bool ta, bool tb, int m, int n, int k, const Operand& a,
                                    const Operand& b) {
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float entry = 0.0f;
      for (int p0 = 0; p0 < k; p0 += 384) {
        float acc = 0.0f;
        for (int p = p0; p < std::min(k, p0 + 384); ++p) {
          acc = std::fma(ta ? a.at(p, i) : a.at(i, p), tb ? b.at(j, p) : b.at(p, j), acc);
        }
        entry = p0 == 0 ? acc : entry + acc;
      }
      c[static_cast<std::size_t>(j) * m + i] = entry;
    }
  }
  return c;
}

// Restores the process's instruction-set level when a test that forces others ends.
struct IsaRestore {
  Isa saved = active_isa();
  ~IsaRestore() { (void)set_active_isa(saved); }
};

TEST_CASE("sgemm: every instruction-set level and thread count gives the contract's bits") {
  IsaRestore restore;
  std::uint64_t seed = 100;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) {
      MESSAGE("level " << isa_name(isa) << " not supported by this CPU: not run");
      continue;
    }
    REQUIRE(set_active_isa(isa).is_ok());
    CAPTURE(isa_name(isa));
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const Shape& s : kShapes) {
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(s.m);
          CAPTURE(s.n);
          CAPTURE(s.k);
          const Operand a = ta ? random_operand(s.k, s.m, seed) : random_operand(s.m, s.k, seed);
          const Operand b =
              tb ? random_operand(s.n, s.k, seed + 1) : random_operand(s.k, s.n, seed + 1);
          seed += 2;
          const std::vector<float> want = contract_product(ta, tb, s.m, s.n, s.k, a, b);
          for (int threads : {1, 2, 3}) {
            CAPTURE(threads);
            std::vector<float> c(want.size(), std::nanf(""));
            sgemm(ta, tb, s.m, s.n, s.k, a.v.data(), a.rows, b.v.data(), b.rows, c.data(), s.m,
                  threads);
            CHECK(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("sgemm: a product large enough to split across threads keeps the contract's bits") {
  IsaRestore restore;
  const int m = 200, n = 150, k = 800;  // above the parallel threshold; rows split (m > n)
  const Operand a = random_operand(m, k, 7), b = random_operand(k, n, 8);
  const std::vector<float> want = contract_product(false, false, m, n, k, a, b);
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    REQUIRE(set_active_isa(isa).is_ok());
    CAPTURE(isa_name(isa));
    for (int threads : {1, 2, 4}) {
      CAPTURE(threads);
      std::vector<float> c(want.size());
      sgemm(false, false, m, n, k, a.v.data(), m, b.v.data(), k, c.data(), m, threads);
      CHECK(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
      // Columns split (n > m): the transposed problem.
      std::vector<float> ct(want.size()), want_t(want.size());
      sgemm(true, true, n, m, k, b.v.data(), k, a.v.data(), m, ct.data(), n, threads);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) want_t[i * n + j] = want[j * m + i];
      }
      CHECK(std::memcmp(ct.data(), want_t.data(), ct.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace
}  // namespace gossip::sgd::cpu

// Spectral analysis against closed forms (docs/design.md §1); the three methods against each other.
#include "topology/spectral.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "common/clock.h"
#include "tests/topology/test_util.h"

namespace gossip::topology {
namespace {

using testing::generated;
using testing::rel_err;
using testing::torus;
constexpr double kPi = std::numbers::pi;

SpectralReport run(const Topology& t, SpectralMethod m = SpectralMethod::kAuto) {
  SpectralOptions o;
  o.method = m;
  auto r = analyze(t, o);
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  return *r;
}

// Lanczos against the dense eigensolver on t: lambda_2 and lambda_n agree within `tolerance`, and
// Lanczos reports a residual below 1e-8. Returns both reports (dense, Lanczos) for more checks.
std::pair<SpectralReport, SpectralReport> lanczos_vs_dense(const Topology& t, double tolerance) {
  const auto de = run(t, SpectralMethod::kDense);
  const auto la = run(t, SpectralMethod::kLanczos);
  CHECK(std::abs(la.lambda2 - de.lambda2) < tolerance);
  CHECK(std::abs(la.lambda_n - de.lambda_n) < tolerance);
  CHECK(la.residual < 1e-8);
  return {de, la};
}

TEST_CASE("ring with weights 1/3: gap = (4/3) sin^2(pi/n) to full relative accuracy") {
  for (int n : {5, 8, 1000, 10000, 1000000}) {
    CAPTURE(n);
    const auto t = generated(GeneratorKind::kRing, n);
    const auto r = run(t);
    CHECK(r.method == SpectralMethod::kExact);
    const double s = std::sin(kPi / n);
    const double gap = 4.0 / 3.0 * s * s;  // = 1 - (1 + 2 cos(2 pi / n)) / 3
    CHECK(rel_err(r.gap, gap) < 1e-13);
    CHECK(rel_err(r.one_minus_lambda2, gap) < 1e-13);
    if (n % 2 == 0) CHECK(std::abs(r.lambda_n + 1.0 / 3.0) < 1e-15);
  }
}

TEST_CASE("torus with weights 1/5: gap = (4/5) sin^2(pi / max side), lambda_n = -3/5 when even") {
  for (auto [r, c] : {std::pair{4, 4}, {6, 9}, {100, 100}, {300, 400}}) {
    CAPTURE(r);
    CAPTURE(c);
    const auto t = torus(r, c);
    const auto rep = run(t);
    CHECK(rep.method == SpectralMethod::kExact);
    const double s = std::sin(kPi / std::max(r, c));
    const double gap2 = 0.8 * s * s;
    if (r % 2 == 0 && c % 2 == 0) CHECK(std::abs(rep.lambda_n + 0.6) < 1e-15);
    CHECK(rel_err(rep.one_minus_lambda2, gap2) < 1e-12);
    const double one_plus_n = 1.0 + rep.lambda_n;
    CHECK(rel_err(rep.gap, std::min(gap2, one_plus_n)) < 1e-12);
  }
}

TEST_CASE("hypercube 2^d with weights 1/(d+1): eigenvalues 1 - 2k/(d+1), gap = 2/(d+1)") {
  for (int d : {3, 6, 16}) {
    CAPTURE(d);
    const auto t = generated(GeneratorKind::kHypercube, 1 << d);
    const auto r = run(t);
    CHECK(r.method == SpectralMethod::kExact);
    CHECK(rel_err(r.gap, 2.0 / (d + 1)) < 1e-13);
    CHECK(rel_err(r.lambda2, 1.0 - 2.0 / (d + 1)) < 1e-13);
    CHECK(rel_err(r.lambda_n, (1.0 - d) / (1.0 + d)) < 1e-13);
  }
}

TEST_CASE("static exponential graph: gap 2/(1+tau) for even n, larger for odd n (vs dense SVD)") {
  for (int n : {4, 12, 16, 64, 100, 1024}) {
    CAPTURE(n);
    const auto t = generated(GeneratorKind::kExponential, n);
    const auto r = run(t);
    CHECK(r.method == SpectralMethod::kExact);
    CHECK_FALSE(r.symmetric);
    const int tau = exponential_hops(n);
    CHECK(rel_err(r.gap, 2.0 / (1 + tau)) < 1e-12);
    if (n <= 100) CHECK(std::abs(r.rho - testing::dense_rho(t.mixing_matrix())) < 1e-12);
  }
  for (int n : {5, 9, 13, 33, 99}) {
    CAPTURE(n);
    const auto t = generated(GeneratorKind::kExponential, n);
    const auto r = run(t);
    const int tau = exponential_hops(n);
    CHECK(r.gap > 2.0 / (1 + tau) + 1e-6);
    CHECK(std::abs(r.rho - testing::dense_rho(t.mixing_matrix())) < 1e-12);
  }
}

TEST_CASE("star: gap = 1/n (eigenvalues 1, 1 - 1/n, 0) - complete graph with W = J: gap = 1") {
  for (int n : {3, 10, 50}) {
    const auto r = run(generated(GeneratorKind::kStar, n));
    CHECK(r.method == SpectralMethod::kDense);
    CHECK(rel_err(r.gap, 1.0 / n) < 1e-12);
    CHECK(std::abs(r.lambda_n) < 1e-12);
  }
  for (int n : {2, 7, 64}) {
    const auto t = generated(GeneratorKind::kComplete, n);
    const auto r = run(t);
    CHECK(r.method == SpectralMethod::kExact);
    CHECK(std::abs(r.gap - 1.0) < 1e-14);
    CHECK(r.rho < 1e-14);
  }
}

TEST_CASE("one-peer exponential graph: the product over one period is exactly J for n = 2^k") {
  for (int n : {2, 8, 64, 256}) {
    CAPTURE(n);
    const auto t = generated(GeneratorKind::kOnePeerExponential, n);
    REQUIRE(t.period() == exponential_hops(n));
    SparseMatrix p = t.mixing_matrix(0);
    for (int k = 1; k < t.period(); ++k) p = SparseMatrix(t.mixing_matrix(k) * p);
    const Eigen::MatrixXd d = Eigen::MatrixXd(p);
    CHECK((d.array() == 1.0 / n).all());  // exact: sums of powers of 1/2
    const auto r = run(t);
    CHECK(r.rho < 1e-12);
    CHECK(r.gap_per_iteration > 0.999999);
  }
  // n not a power of two: the product is not J; exact (group) and dense (product) methods agree.
  for (int n : {6, 12, 40}) {
    const auto t = generated(GeneratorKind::kOnePeerExponential, n);
    const auto ex = run(t, SpectralMethod::kExact);
    const auto de = run(t, SpectralMethod::kDense);
    CHECK(ex.rho > 1e-3);
    CHECK(std::abs(ex.rho - de.rho) < 1e-12);
  }
}

TEST_CASE("exact, dense and Lanczos agree on circulant and translation-invariant W") {
  std::vector<Topology> ts;
  ts.push_back(generated(GeneratorKind::kRing, 64));
  ts.push_back(torus(8, 10));
  ts.push_back(generated(GeneratorKind::kHypercube, 64));
  GeneratorSpec s;
  s.kind = GeneratorKind::kKRing;
  s.nodes = 50;
  s.k = 3;
  ts.push_back(testing::must(Topology::generate(s, WeightScheme::kLazyMetropolisHastings)));
  for (const auto& t : ts) {
    CAPTURE(t.name());
    const auto ex = run(t, SpectralMethod::kExact);
    const auto de = run(t, SpectralMethod::kDense);
    const auto la = run(t, SpectralMethod::kLanczos);
    CHECK(rel_err(de.gap, ex.gap) < 1e-10);
    CHECK(rel_err(la.gap, ex.gap) < 1e-9);
    CHECK(std::abs(de.lambda_n - ex.lambda_n) < 1e-12);
    CHECK(std::abs(la.lambda_n - ex.lambda_n) < 1e-10);
  }
}

TEST_CASE("dense and Lanczos agree on seeded random graphs - exact refuses them") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    GeneratorSpec rr;
    rr.kind = GeneratorKind::kRandomRegular;
    rr.nodes = 300;
    rr.degree = 4;
    rr.seed = seed;
    GeneratorSpec er;
    er.kind = GeneratorKind::kErdosRenyi;
    er.nodes = 200;
    er.p = 0.05;
    er.seed = seed;
    for (const auto& spec : {rr, er}) {
      const auto t = testing::must(Topology::generate(spec, WeightScheme::kMetropolisHastings));
      const auto [de, la] = lanczos_vs_dense(t, 1e-10);
      CHECK(rel_err(la.gap, de.gap) < 1e-9);
      SpectralOptions exact;
      exact.method = SpectralMethod::kExact;
      CHECK_FALSE(analyze(t, exact).is_ok());
    }
  }
}

TEST_CASE("non-symmetric W: dense and Lanczos ||W - J||_2 agree with a Jacobi SVD") {
  for (int n : {20, 37}) {
    const auto t = generated(GeneratorKind::kExponential, n);
    const double ref = testing::dense_rho(t.mixing_matrix());
    CHECK(std::abs(run(t, SpectralMethod::kDense).rho - ref) < 1e-12);
    CHECK(std::abs(run(t, SpectralMethod::kLanczos).rho - ref) < 1e-9);
  }
}

// W(i, j) = w(i ^ j) for a random symmetric generating set of (Z_2)^d with random weights: a
// weighted Cayley graph, not a hypercube, so only the group structure is shared with the generator.
SparseMatrix random_xor_invariant(int d, std::uint64_t seed) {
  const int n = 1 << d;
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<double> w(static_cast<std::size_t>(n), 0.0);
  double total = 0.0;
  for (int k = 0; k < d + 4; ++k) {  // the d unit vectors (so it generates: connected), 4 more
    const int g = k < d ? 1 << k : 1 + static_cast<int>(next() % static_cast<std::uint64_t>(n - 1));
    const double v = 0.02 + 0.1 * static_cast<double>(next() % 1000) / 1000.0;
    if (w[g] == 0.0) total += v, w[g] = v;
  }
  w[0] = 1.0 - total;  // row sums exactly 1 up to rounding in this one subtraction
  std::vector<Eigen::Triplet<double>> t;
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < n; ++g)
      if (w[g] != 0.0) t.emplace_back(i, i ^ g, w[g]);
  SparseMatrix m(n, n);
  m.setFromTriplets(t.begin(), t.end());
  m.makeCompressed();
  return m;
}

TEST_CASE("Walsh-Hadamard exact method equals the dense eigensolver on (Z_2)^d, d = 6..8") {
  for (int d : {6, 7, 8}) {
    CAPTURE(d);
    std::vector<SparseMatrix> ws;
    ws.push_back(generated(GeneratorKind::kHypercube, 1 << d).mixing_matrix());
    ws.push_back(random_xor_invariant(d, 11 + d));
    ws.push_back(random_xor_invariant(d, 23 + d));
    for (const auto& w : ws) {
      SpectralOptions exact;
      exact.method = SpectralMethod::kExact;
      exact.symmetry.assign(static_cast<std::size_t>(d), 2);
      auto ex = analyze_matrix(w, exact);
      REQUIRE_MESSAGE(ex.is_ok(), ex.status().to_string());
      CHECK(ex->detail.find("Walsh-Hadamard") != std::string::npos);
      SpectralOptions dense;
      dense.method = SpectralMethod::kDense;
      const auto de = *analyze_matrix(w, dense);
      CHECK(std::abs(ex->lambda2 - de.lambda2) < 1e-13);
      CHECK(std::abs(ex->lambda_n - de.lambda_n) < 1e-13);
      CHECK(rel_err(ex->gap, de.gap) < 1e-12);
      // The whole spectrum, sorted, against Eigen's.
      auto gs = group_spectrum(w, exact.symmetry);
      REQUIRE(gs.is_ok());
      std::vector<double> ours = gs->re;
      std::sort(ours.begin(), ours.end());
      Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es((Eigen::MatrixXd(w)));
      double worst = 0.0;
      for (int k = 0; k < (1 << d); ++k)
        worst = std::max(worst, std::abs(ours[k] - es.eigenvalues()[k]));
      CHECK(worst < 1e-13);
    }
  }
}

TEST_CASE("Walsh-Hadamard method refuses a W that is not XOR-invariant") {
  SparseMatrix w = random_xor_invariant(6, 5);
  // Move weight between two entries of row/column 3 symmetrically: still doubly stochastic and
  // symmetric, no longer invariant.
  const int i = 3, j = 3 ^ 1;
  const double eps = 1e-3;
  w.coeffRef(i, i) += eps;
  w.coeffRef(j, j) += eps;
  w.coeffRef(i, j) -= eps;
  w.coeffRef(j, i) -= eps;
  w.makeCompressed();
  SpectralOptions exact;
  exact.method = SpectralMethod::kExact;
  exact.symmetry.assign(6, 2);
  CHECK_FALSE(analyze_matrix(w, exact).is_ok());
  CHECK_FALSE(group_spectrum(w, exact.symmetry).is_ok());
  exact.method = SpectralMethod::kAuto;  // falls back to dense, still right
  SpectralOptions dense;
  dense.method = SpectralMethod::kDense;
  CHECK(std::abs(analyze_matrix(w, exact)->rho - analyze_matrix(w, dense)->rho) < 1e-14);
}

TEST_CASE(
    "Lanczos (one Krylov space, no restarts) equals dense to 1e-12 on random regular graphs") {
  for (std::uint64_t seed : {1u, 7u}) {
    for (int degree : {3, 4, 8}) {
      CAPTURE(seed);
      CAPTURE(degree);
      GeneratorSpec rr{
          .kind = GeneratorKind::kRandomRegular, .nodes = 1200, .degree = degree, .seed = seed};
      const auto t = testing::must(Topology::generate(rr, WeightScheme::kMetropolisHastings));
      const auto [de, la] = lanczos_vs_dense(t, 1e-12);
      CHECK(rel_err(la.rho, de.rho) < 1e-12);
      // The direct entry point, warm-started from its own answer, converges at once to the same.
      auto ex = symmetric_extremes(t.mixing_matrix());
      REQUIRE(ex.is_ok());
      CHECK(std::abs(ex->u.sum()) < 1e-10);  // eigenvectors orthogonal to 1, unit length
      CHECK(std::abs(ex->u.norm() - 1.0) < 1e-12);
      const Eigen::VectorXd warm = ex->u + ex->v;
      auto again = symmetric_extremes(t.mixing_matrix(), 1e-10, 20000, &warm);
      REQUIRE(again.is_ok());
      CHECK(std::abs(again->lambda2 - ex->lambda2) < 1e-12);
      CHECK(again->steps <= ex->steps);
    }
  }
}

TEST_CASE("Lanczos keeps the all-ones direction out when it would be the extreme one (lazy W)") {
  // Lazy W has spectrum in [0, 1]; P W P has eigenvalue 0 on the ones vector, below lambda_n.
  GeneratorSpec s{.kind = GeneratorKind::kRandomRegular, .nodes = 900, .degree = 4, .seed = 3};
  const auto t = testing::must(Topology::generate(s, WeightScheme::kLazyMetropolisHastings));
  const auto de = run(t, SpectralMethod::kDense);
  const auto la = run(t, SpectralMethod::kLanczos);
  CHECK(de.lambda_n > 0.1);
  CHECK(std::abs(la.lambda_n - de.lambda_n) < 1e-12);
  CHECK(std::abs(la.lambda2 - de.lambda2) < 1e-12);
}

TEST_CASE("group_spectrum is the DFT of the first row and rejects non-invariant W") {
  const auto t = generated(GeneratorKind::kRing, 7);
  auto s = group_spectrum(t.mixing_matrix(), {7});
  REQUIRE(s.is_ok());
  for (int k = 0; k < 7; ++k)
    CHECK(std::abs(s->re[k] - (1.0 + 2.0 * std::cos(2 * kPi * k / 7)) / 3.0) < 1e-15);
  const auto star = generated(GeneratorKind::kStar, 7);
  CHECK_FALSE(group_spectrum(star.mixing_matrix(), {7}).is_ok());
  CHECK_FALSE(group_spectrum(t.mixing_matrix(), {2, 3}).is_ok());
}

}  // namespace

namespace {

using testing::must;

// A grid (no translation symmetry, so auto picks Lanczos past dense_max_nodes): the estimate's
// diameter is exact, its step count bounds the steps Lanczos takes from above within 1.5x, and a
// time limit below the estimate refuses at once, naming it.
TEST_CASE("Lanczos estimate: a grid's diameter, steps bounded above, refusals under a time limit") {
  GeneratorSpec spec{.kind = GeneratorKind::kGrid, .rows = 60, .cols = 80};
  const Topology t = must(Topology::generate(spec, WeightScheme::kDefault));
  const LanczosEstimate e = lanczos_estimate({&t.mixing_matrix(0)});
  CHECK(e.diameter == 59 + 79);
  CHECK(e.products == 2.0 * e.steps);
  CHECK(e.seconds > 0);
  CHECK(e.to_string().find("hop diameter >= 138") != std::string::npos);
  SpectralOptions lanczos;
  lanczos.method = SpectralMethod::kLanczos;
  std::string noted = "none";
  lanczos.note = [&](const std::string& text) { noted = text; };
  auto r = analyze(t, lanczos);
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  CHECK(r->iterations <= e.steps);
  CHECK(e.steps <= 1.5 * r->iterations);
  CHECK(noted == "none");  // an estimate under 5 s is not worth a note
  lanczos.time_limit_s = e.seconds / 100;
  Stopwatch watch;
  auto refused = analyze(t, lanczos);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(refused.status().message().find("needs about") != std::string::npos);
  CHECK(refused.status().message().find("more than the time limit") != std::string::npos);
  CHECK(watch.elapsed_seconds() < 0.5 * r->seconds + 0.5);  // at once, not after the run
}

TEST_CASE("symmetric_extremes stops at its time limit, naming the steps done") {
  GeneratorSpec spec{.kind = GeneratorKind::kGrid, .rows = 40, .cols = 40};
  const Topology t = must(Topology::generate(spec, WeightScheme::kDefault));
  SparseMatrix w = t.mixing_matrix(0);
  w.makeCompressed();
  auto r = symmetric_extremes(w, 1e-10, 20000, nullptr, 1e-9);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(r.status().message().find("after 8 steps") != std::string::npos);
  CHECK(symmetric_extremes(w, 1e-10, 20000, nullptr, 0).is_ok());  // 0: no limit
}

}  // namespace
}  // namespace gossip::topology

// Mixing over the state matrix: against a dense double reference, bit for bit against
// sgd::Backend::mix (what a gossipd node computes), average preservation for every doubly
// stochastic W, and the consensus decay rate ρ² per iteration that gossip_topology predicts.
#include "sim/node_state.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "tests/support/topologies.h"
#include "topology/spectral.h"
#include "topology/topology.h"

namespace gossip::sim {
namespace {

using testing::generated_topology;

StateMatrix random_state(Eigen::Index d, int n, std::uint64_t seed, double offset = 0) {
  Rng rng(seed);
  StateMatrix x(d, n);
  for (Eigen::Index k = 0; k < x.size(); ++k)
    x.data()[k] = static_cast<float>(offset + rng.normal());
  return x;
}

// A random doubly stochastic matrix: a convex combination of random permutation matrices
// (Birkhoff–von Neumann: every doubly stochastic matrix is one). Generally non-symmetric.
Eigen::SparseMatrix<double> random_doubly_stochastic(int n, int terms, Rng& rng) {
  Eigen::MatrixXd dense = Eigen::MatrixXd::Zero(n, n);
  std::vector<double> a(terms);
  for (double& v : a) v = 0.05 + rng.uniform();
  const double total = std::accumulate(a.begin(), a.end(), 0.0);
  std::vector<int> perm(n);
  for (int k = 0; k < terms; ++k) {
    std::iota(perm.begin(), perm.end(), 0);
    rng.shuffle(std::span<int>(perm));
    for (int i = 0; i < n; ++i) dense(i, perm[i]) += a[k] / total;
  }
  return dense.sparseView();
}

TEST_CASE("mix equals X·Wᵀ − γU computed densely in double") {
  Rng rng(3);
  for (int n : {1, 5, 37}) {
    for (Eigen::Index d : {1, 17, 1000, 4099}) {
      const auto w = random_doubly_stochastic(n, 3, rng);
      auto plan = MixingPlan::from_matrix(w);
      REQUIRE(plan.is_ok());
      const StateMatrix x = random_state(d, n, 10 + d);
      const StateMatrix u = random_state(d, n, 20 + d);
      StateMatrix out;
      mix(*plan, x, 0.25f, &u, out);
      const Eigen::MatrixXd ref =
          x.cast<double>() * Eigen::MatrixXd(w).transpose() - 0.25 * u.cast<double>();
      CHECK((out.cast<double>() - ref).cwiseAbs().maxCoeff() < 1e-5);
      mix(*plan, x, 0.0f, nullptr, out);
      const Eigen::MatrixXd pure = x.cast<double>() * Eigen::MatrixXd(w).transpose();
      CHECK((out.cast<double>() - pure).cwiseAbs().maxCoeff() < 1e-5);
    }
  }
}

// mix (with and without the −γU term) and mix_node against sgd::Backend::mix node by node,
// memcmp; returns the number of node columns compared.
int compare_with_backend(const Eigen::SparseMatrix<double>& w, Eigen::Index d,
                         sgd::Backend& backend) {
  auto plan = MixingPlan::from_matrix(w);
  REQUIRE(plan.is_ok());
  const int n = plan->num_nodes();
  const StateMatrix x = random_state(d, n, 1 + d);
  const StateMatrix u = random_state(d, n, 2 + d);
  int compared = 0;
  for (bool with_update : {true, false}) {
    StateMatrix out;
    mix(*plan, x, 0.1f, with_update ? &u : nullptr, out);
    std::vector<float> node(d);
    for (int i = 0; i < n; ++i) {
      std::vector<sgd::MixTerm> terms;
      for (int q = plan->row_begin()[i]; q < plan->row_begin()[i + 1]; ++q) {
        terms.push_back({plan->weight()[q], x.col(plan->column()[q]).data()});
      }
      backend.mix(node.data(), terms, with_update ? 0.1f : 0.0f,
                  with_update ? u.col(i).data() : nullptr, static_cast<std::size_t>(d));
      INFO("n " << n << " d " << d << " node " << i << " update " << with_update);
      CHECK(std::memcmp(node.data(), out.col(i).data(), d * sizeof(float)) == 0);
      // mix_node (the simulator's per-node combine step) is column i of mix, bit for bit.
      std::vector<float> one(d, -1.0f);
      mix_node(*plan, x, i, 0.1f, with_update ? u.col(i).data() : nullptr, one.data());
      CHECK(std::memcmp(one.data(), out.col(i).data(), d * sizeof(float)) == 0);
      ++compared;
    }
  }
  return compared;
}

// A circulant W with the given weights at offsets −h..h (row i: column (i + o) mod n).
Eigen::SparseMatrix<double> circulant_band(int n, const std::vector<double>& weights) {
  const int h = static_cast<int>(weights.size()) / 2;
  Eigen::MatrixXd dense = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    for (int o = -h; o <= h; ++o) dense(i, ((i + o) % n + n) % n) += weights[o + h];
  }
  return dense.sparseView();
}

TEST_CASE("mix is bit-identical to sgd::Backend::mix with terms in increasing node order") {
  auto backend = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  Rng rng(5);
  // Exponential graphs (7 and 9 terms per node, several row blocks with partial tiles for
  // n = 200), a ring, and random non-symmetric doubly stochastic matrices (terms that wrap).
  int compared = 0;
  compared += compare_with_backend(
      generated_topology(topology::GeneratorKind::kExponential, 16).mixing_matrix(), 3001,
      **backend);
  compared += compare_with_backend(
      generated_topology(topology::GeneratorKind::kExponential, 200).mixing_matrix(), 1000,
      **backend);
  compared += compare_with_backend(
      generated_topology(topology::GeneratorKind::kRing, 5).mixing_matrix(), 64, **backend);
  compared += compare_with_backend(random_doubly_stochastic(9, 4, rng), 130, **backend);
  compared += compare_with_backend(random_doubly_stochastic(33, 6, rng), 17, **backend);
  // Columns of whole 64-byte lines (d % 16 == 0, the simulator's padded state): mix runs node by
  // node over whole columns instead of row blocks and bands.
  compared += compare_with_backend(
      generated_topology(topology::GeneratorKind::kExponential, 64).mixing_matrix(), 1008,
      **backend);
  compared += compare_with_backend(random_doubly_stochastic(21, 5, rng), 1008, **backend);
  // One term per row (a permutation), and rows of up to 24 terms: mix_rows' kernels with the
  // terms fixed at compile time (1..16 terms) and the generic tiles past 16 terms.
  compared += compare_with_backend(random_doubly_stochastic(12, 1, rng), 200, **backend);
  const auto many = random_doubly_stochastic(40, 24, rng);
  const Eigen::MatrixXd many_dense(many);
  int most_terms = 0;
  for (int i = 0; i < 40; ++i) {
    most_terms = std::max(most_terms, static_cast<int>((many_dense.row(i).array() != 0).count()));
  }
  CHECK(most_terms > 16);
  compared += compare_with_backend(many, 1000, **backend);
  CHECK(compared == 2 * (16 + 200 + 5 + 9 + 33 + 64 + 21 + 12 + 40));
}

TEST_CASE("banded runs: detected where rows are shifted copies, and mixed bit for bit") {
  auto backend = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  // A ring: rows 1..n−2 are the band {i−1, i, i+1} with weights 1/3; rows 0 and n−1 wrap.
  const auto ring = generated_topology(topology::GeneratorKind::kRing, 64).mixing_matrix();
  auto plan = MixingPlan::from_matrix(ring);
  REQUIRE(plan.is_ok());
  REQUIRE(plan->bands().size() == 1);
  CHECK(plan->bands()[0].first == 1);
  CHECK(plan->bands()[0].count == 62);
  CHECK(plan->bands()[0].offset == -1);
  CHECK(plan->bands()[0].terms == 3);
  // Five terms (offsets −2..2): rows 2..n−3.
  const auto five = circulant_band(40, {0.1, 0.2, 0.4, 0.2, 0.1});
  REQUIRE(MixingPlan::from_matrix(five)->bands().size() == 1);
  CHECK(MixingPlan::from_matrix(five)->bands()[0].first == 2);
  CHECK(MixingPlan::from_matrix(five)->bands()[0].count == 36);
  CHECK(MixingPlan::from_matrix(five)->bands()[0].terms == 5);
  // Two terms (self and the next node, a directed ring): rows 0..n−2.
  const auto two = circulant_band(12, {0.0, 0.5, 0.5});
  REQUIRE(MixingPlan::from_matrix(two)->bands().size() == 1);
  CHECK(MixingPlan::from_matrix(two)->bands()[0].first == 0);
  CHECK(MixingPlan::from_matrix(two)->bands()[0].count == 11);
  CHECK(MixingPlan::from_matrix(two)->bands()[0].terms == 2);
  // Tridiagonal with weights that change at rows 10 and 20: three runs, split where they change.
  Eigen::MatrixXd tri = Eigen::MatrixXd::Zero(30, 30);
  for (int i = 0; i < 30; ++i) {
    const double side = i < 10 ? 0.25 : i < 20 ? 0.125 : 0.3;
    if (i > 0) tri(i, i - 1) = side;
    tri(i, i) = 1 - 2 * side;
    if (i + 1 < 30) tri(i, i + 1) = side;
  }
  auto tri_plan = MixingPlan::from_matrix(tri.sparseView());
  REQUIRE(tri_plan->bands().size() == 3);
  CHECK(tri_plan->bands()[0].first == 1);
  CHECK(tri_plan->bands()[0].count == 9);
  CHECK(tri_plan->bands()[1].first == 10);
  CHECK(tri_plan->bands()[1].count == 10);
  CHECK(tri_plan->bands()[2].first == 20);
  CHECK(tri_plan->bands()[2].count == 9);
  // No band in an exponential graph of 16 (its columns are not contiguous).
  CHECK(MixingPlan::from_matrix(
            generated_topology(topology::GeneratorKind::kExponential, 16).mixing_matrix())
            ->bands()
            .empty());

  // Bit for bit: widths with only a tail (d < 64), 128-row steps plus a 64-row tile plus a tail
  // (d = 1000), and several row blocks (n = 64: 2048 rows per block); d = 64 and 192 (multiples
  // of 16) take the whole-column path instead of the bands.
  int compared = 0;
  for (Eigen::Index d : {1, 37, 64, 192, 1000, 5000}) {
    compared += compare_with_backend(ring, d, **backend);
  }
  compared += compare_with_backend(five, 1000, **backend);
  compared += compare_with_backend(two, 333, **backend);
  compared += compare_with_backend(tri.sparseView(), 1000, **backend);
  compared += compare_with_backend(
      generated_topology(topology::GeneratorKind::kRing, 1024).mixing_matrix(), 300, **backend);
  CHECK(compared == 2 * (6 * 64 + 40 + 12 + 30 + 1024));
}

TEST_CASE("pure gossip preserves the average for every doubly stochastic W") {
  Rng rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + static_cast<int>(rng.uniform_int(40));
    const auto w = random_doubly_stochastic(n, 1 + static_cast<int>(rng.uniform_int(5)), rng);
    auto plan = MixingPlan::from_matrix(w);
    REQUIRE(plan.is_ok());
    StateMatrix x = random_state(64, n, 100 + trial, /*offset=*/3.0), next;
    const Eigen::VectorXd before = node_average(x);
    for (int t = 0; t < 50; ++t) {
      mix(*plan, x, 0.0f, nullptr, next);
      x.swap(next);
    }
    // Each step rounds every entry once per term (relative 2^-24 ≈ 6e-8 each) and float weights
    // make column sums 1 ± ~1e-7: 50 steps stay within ~1e-5 of |x| ≈ 3.
    CHECK((node_average(x) - before).cwiseAbs().maxCoeff() < 2e-5);
  }
  // A matrix that is not doubly stochastic (row-stochastic only) visibly moves the average: the
  // check above can fail.
  Eigen::MatrixXd skew(3, 3);
  skew << 1, 0, 0, 1, 0, 0, 0, 0, 1;
  auto plan = MixingPlan::from_matrix(skew.sparseView());
  REQUIRE(plan.is_ok());
  StateMatrix x = random_state(8, 3, 5), next;
  mix(*plan, x, 0.0f, nullptr, next);
  CHECK((node_average(next) - node_average(x)).cwiseAbs().maxCoeff() > 1e-3);
}

// Runs pure gossip from a random start and returns the mean per-iteration ratio of consensus
// distances over the last 20 of `iterations`. Pure gossip is linear and keeps the average, so the
// deviation X − X̄ evolves on its own; re-centring and rescaling it after every step (as in the
// power method) changes no ratio but keeps float32 far from underflow and from the rounding floor
// that fast-mixing graphs would otherwise reach within a few dozen iterations.
double asymptotic_rate(const topology::Topology& topo, int iterations) {
  std::vector<MixingPlan> plans;
  for (int p = 0; p < topo.period(); ++p) {
    auto plan = MixingPlan::from_matrix(topo.mixing_matrix(p));
    REQUIRE(plan.is_ok());
    plans.push_back(std::move(plan).value());
  }
  StateMatrix x = random_state(4, topo.num_nodes(), 42), next;
  double log_sum = 0;
  int counted = 0;
  for (int t = 0; t < iterations; ++t) {
    const double before = consensus_distance(x);
    mix(plans[t % plans.size()], x, 0.0f, nullptr, next);
    x.swap(next);
    const double after = consensus_distance(x);
    if (t >= iterations - 20) {
      log_sum += std::log(after / before);
      ++counted;
    }
    const Eigen::VectorXf mean = node_average(x).cast<float>();
    x.colwise() -= mean;
    x *= static_cast<float>(1.0 / std::sqrt(consensus_distance(x)));
  }
  return std::exp(log_sum / counted);
}

TEST_CASE("pure gossip: consensus distance decays at rate ρ² per iteration (ρ from topology)") {
  struct Case {
    std::string name;
    topology::Topology topo;
  };
  std::vector<Case> cases;
  cases.push_back({"ring 32", generated_topology(topology::GeneratorKind::kRing, 32)});
  cases.push_back({"torus 8x8", generated_topology(topology::GeneratorKind::kTorus, 64, 8, 8)});
  cases.push_back({"torus 4x12", generated_topology(topology::GeneratorKind::kTorus, 48, 4, 12)});
  cases.push_back(
      {"exponential 32", generated_topology(topology::GeneratorKind::kExponential, 32)});
  cases.push_back(
      {"exponential 40", generated_topology(topology::GeneratorKind::kExponential, 40)});
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto report = topology::analyze(c.topo);
    REQUIRE(report.is_ok());
    const double rho = report->rho;
    const double rate = asymptotic_rate(c.topo, 200);
    MESSAGE(c.name << ": rho^2 = " << rho * rho << ", measured " << rate);
    CHECK(rate == doctest::Approx(rho * rho).epsilon(0.01));
  }
}

TEST_CASE("one-peer exponential graph: τ consecutive steps reach exact consensus") {
  const int n = 16;  // τ = 4
  const auto topo = generated_topology(topology::GeneratorKind::kOnePeerExponential, n);
  REQUIRE(topo.period() == 4);
  std::vector<MixingPlan> plans;
  for (int p = 0; p < 4; ++p) plans.push_back(*MixingPlan::from_matrix(topo.mixing_matrix(p)));
  StateMatrix x = random_state(32, n, 9), next;
  const double start = consensus_distance(x);
  for (int t = 0; t < 3; ++t) {
    mix(plans[t], x, 0.0f, nullptr, next);
    x.swap(next);
  }
  CHECK(consensus_distance(x) > 1e-3 * start);
  mix(plans[3], x, 0.0f, nullptr, next);
  CHECK(consensus_distance(next) < 1e-12 * start);
}

TEST_CASE("consensus distance and average: closed forms") {
  StateMatrix x(2, 3);
  x << 1, 2, 3,  //
      0, 0, 6;
  const Eigen::VectorXd mean = node_average(x);
  CHECK(mean(0) == doctest::Approx(2));
  CHECK(mean(1) == doctest::Approx(2));
  // ((1-2)² + 4 + 0 + 4 + 1 + 16) / 3 = 26 / 3
  CHECK(consensus_distance(x) == doctest::Approx(26.0 / 3));
}

TEST_CASE("MixingPlan: degrees, in-neighbours, and errors for bad matrices") {
  const auto topo = generated_topology(topology::GeneratorKind::kRing, 6);
  auto plan = MixingPlan::from_matrix(topo.mixing_matrix());
  REQUIRE(plan.is_ok());
  CHECK(plan->max_degree() == 2);
  CHECK(plan->in_neighbours()[0] == std::vector<int>{1, 5});
  const auto expo = generated_topology(topology::GeneratorKind::kExponential, 8);  // τ = 3
  CHECK(MixingPlan::from_matrix(expo.mixing_matrix())->max_degree() == 3);

  Eigen::MatrixXd bad(2, 2);
  bad << 0.5, 0.5, -0.5, 1.5;
  CHECK(MixingPlan::from_matrix(bad.sparseView()).status().message().find("nonnegative") !=
        std::string::npos);
  Eigen::SparseMatrix<double> rect(2, 3);
  CHECK(!MixingPlan::from_matrix(rect).is_ok());
}

}  // namespace
}  // namespace gossip::sim

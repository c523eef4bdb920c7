// Push-sum weights (topology/push_sum.h), against closed forms and a dense reference:
//  - P(t) is column-stochastic on every topology kind it is built for (mass conservation);
//  - the one-peer exponential graph (n = 2^τ): from distinct starts, z_i equals the exact average
//    after τ iterations (the product of τ consecutive P(t) is J) and not one iteration earlier;
//  - the directed ring: ||z(t) − z̄|| decays exactly as SLEM(P)^t, SLEM from a dense eigen-solver
//    and in closed form cos(π/n);
//  - a non-regular digraph: the weights move (Σ_i w_i stays n), x_i = w_i z_i does not reach the
//    average while z_i does, and the node-by-node iteration equals the dense reference
//    z(t) = (P^t x_0) / (P^t 1);
//  - EXPLICIT weights that are not column-stochastic are refused naming `weights`.
#include "topology/push_sum.h"

#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "tests/topology/test_util.h"

namespace gossip::topology {
namespace {

using testing::generated;
using testing::must;

// n nodes, each holding d coordinates of z (double) and a weight w (float, as nodes keep it).
struct State {
  std::vector<std::vector<double>> z;
  std::vector<float> w;
};

// One pure push-sum iteration (no gradient), every node as a node does it: its row of P(t) and its
// neighbours' weights (push_sum_mix), then z_i' = Σ_j c_ij z_j.
State iterate(const Topology& topo, const State& s, std::int64_t t) {
  const int n = topo.num_nodes();
  State next = s;
  for (int i = 0; i < n; ++i) {
    const auto row = push_sum_row(topo, i, t);
    std::vector<float> w;
    for (const auto& [j, p] : row) w.push_back(s.w[static_cast<std::size_t>(j)]);
    const PushSumMix mix = push_sum_mix(i, row, w);
    next.w[i] = mix.weight;
    for (std::size_t k = 0; k < s.z[i].size(); ++k) {
      double acc = mix.self * s.z[i][k];
      for (const auto& [j, c] : mix.neighbours) acc += c * s.z[j][k];
      next.z[i][k] = acc;
    }
  }
  return next;
}

State distinct_starts(int n) {
  State s;
  for (int i = 0; i < n; ++i) {
    s.z.push_back({static_cast<double>(i * i) + 0.5, std::sin(1.7 * i), i % 3 == 0 ? 5.0 : -1.0});
    s.w.push_back(1.0f);
  }
  return s;
}

std::vector<double> mean_of(const State& s) {
  std::vector<double> m(s.z[0].size(), 0.0);
  for (const auto& zi : s.z) {
    for (std::size_t k = 0; k < m.size(); ++k) m[k] += zi[k] / static_cast<double>(s.z.size());
  }
  return m;
}

// ||z − z̄_0||_F over nodes and coordinates, z̄_0 the average of the starts.
double distance(const State& s, const std::vector<double>& mean) {
  double sum = 0;
  for (const auto& zi : s.z) {
    for (std::size_t k = 0; k < mean.size(); ++k) sum += (zi[k] - mean[k]) * (zi[k] - mean[k]);
  }
  return std::sqrt(sum);
}

double weight_sum(const State& s) {
  double sum = 0;
  for (float w : s.w) sum += w;
  return sum;
}

// The second-largest eigenvalue modulus of P, by a dense eigen-solver.
double slem(const SparseMatrix& p) {
  const Eigen::MatrixXd dense(p);
  Eigen::EigenSolver<Eigen::MatrixXd> es(dense);
  std::vector<double> mod;
  for (Eigen::Index k = 0; k < es.eigenvalues().size(); ++k)
    mod.push_back(std::abs(es.eigenvalues()(k)));
  std::sort(mod.rbegin(), mod.rend());
  CHECK(mod[0] == doctest::Approx(1.0).epsilon(1e-12));  // column-stochastic: 1 is an eigenvalue
  return mod[1];
}

void check_column_stochastic(const SparseMatrix& p) {
  const Eigen::MatrixXd d(p);
  for (Eigen::Index j = 0; j < d.cols(); ++j) {
    CHECK(d.col(j).sum() == doctest::Approx(1.0).epsilon(1e-15));
    CHECK(d.col(j).minCoeff() >= 0.0);
  }
}

Topology directed(int n, const std::vector<std::pair<int, int>>& arcs) {
  Graph g = Graph::directed(n, arcs).value();
  // Any W with the arcs' support: push-sum takes only the support (default scheme).
  SparseMatrix w(n, n);
  std::vector<Eigen::Triplet<double>> e;
  for (int i = 0; i < n; ++i) {
    const double share = 1.0 / (1.0 + static_cast<double>(g.in_degree(i)));
    e.emplace_back(i, i, share);
    for (int j : g.in_neighbors(i)) e.emplace_back(i, j, share);
  }
  w.setFromTriplets(e.begin(), e.end());
  return must(Topology::from_parts("digraph", std::move(g), {}, w, WeightScheme::kUniform));
}

Topology directed_ring(int n) {
  std::vector<std::pair<int, int>> arcs;
  for (int i = 0; i < n; ++i) arcs.emplace_back(i, (i + 1) % n);
  return directed(n, arcs);
}

TEST_CASE(
    "P(t) is column-stochastic on undirected, directed, non-regular and time-varying graphs") {
  for (const Topology& topo :
       {generated(GeneratorKind::kRing, 7), generated(GeneratorKind::kStar, 6),
        generated(GeneratorKind::kExponential, 8), generated(GeneratorKind::kOnePeerExponential, 8),
        directed_ring(5)}) {
    for (int t = 0; t < topo.period(); ++t) check_column_stochastic(push_sum_matrix(topo, t));
  }
  // The star is not regular: its P is not doubly stochastic (the hub splits over 6, a leaf over 2).
  const Eigen::MatrixXd star(push_sum_matrix(generated(GeneratorKind::kStar, 6), 0));
  CHECK(star.row(0).sum() > 1.5);
}

TEST_CASE("one-peer exponential graph, n = 16: z_i is the exact average after log2 n iterations") {
  const int n = 16;
  const Topology topo = generated(GeneratorKind::kOnePeerExponential, n);
  State s = distinct_starts(n);
  const std::vector<double> mean = mean_of(s);
  for (int t = 0; t < 4; ++t) {
    s = iterate(topo, s, t);
    CHECK(weight_sum(s) == n);  // mass conservation (every weight stays exactly 1 here)
    if (t == 2) CHECK(distance(s, mean) > 1.0);  // not before τ = 4 iterations
  }
  for (int i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < mean.size(); ++k) {
      CHECK(s.z[i][k] == doctest::Approx(mean[k]).epsilon(1e-14).scale(1.0));
    }
  }
  // The same in matrix form: P(3) P(2) P(1) P(0) = J.
  Eigen::MatrixXd prod = Eigen::MatrixXd::Identity(n, n);
  for (int t = 0; t < 4; ++t) prod = Eigen::MatrixXd(push_sum_matrix(topo, t)) * prod;
  CHECK((prod.array() - 1.0 / n).abs().maxCoeff() < 1e-15);
}

TEST_CASE("directed ring: ||z(t) - mean|| decays as SLEM(P)^t, SLEM = cos(pi/n)") {
  for (int n : {5, 8, 12}) {
    const Topology topo = directed_ring(n);
    const double lambda = slem(push_sum_matrix(topo, 0));
    CHECK(lambda == doctest::Approx(std::cos(std::numbers::pi / n)).epsilon(1e-12));
    // A start in the span of the second eigenvectors (a real combination of ω^i and ω^{-i}):
    // P is normal (circulant), so its error decays exactly as |λ_2|^t.
    State s;
    for (int i = 0; i < n; ++i) {
      s.z.push_back({3.0 + std::cos(2 * std::numbers::pi * i / n)});
      s.w.push_back(1.0f);
    }
    const std::vector<double> mean = mean_of(s);
    const double e0 = distance(s, mean);
    for (int t = 1; t <= 40; ++t) {
      s = iterate(topo, s, t);
      CHECK(weight_sum(s) == n);
      CHECK(distance(s, mean) / e0 == doctest::Approx(std::pow(lambda, t)).epsilon(1e-9));
    }
  }
}

TEST_CASE("non-regular digraph: the weights move, z reaches the average, x does not") {
  // A directed ring of 6 with chords 0 -> 2, 0 -> 3, 0 -> 4: node 0 splits over 5, the others
  // over 2, so P is column- but not row-stochastic and the weights leave 1.
  const int n = 6;
  std::vector<std::pair<int, int>> arcs = {{0, 2}, {0, 3}, {0, 4}};
  for (int i = 0; i < n; ++i) arcs.emplace_back(i, (i + 1) % n);
  const Topology topo = directed(n, arcs);
  const SparseMatrix p = push_sum_matrix(topo, 0);
  check_column_stochastic(p);
  const double lambda = slem(p);
  CHECK(lambda < 1.0);

  State s = distinct_starts(n);
  const std::vector<double> mean = mean_of(s);
  // Dense reference: x(t) = P^t z_0 (x_0 = z_0 since w_0 = 1), w(t) = P^t 1, z = x / w.
  const Eigen::MatrixXd pd(p);
  Eigen::MatrixXd x(n, 3);
  for (int i = 0; i < n; ++i) x.row(i) << s.z[i][0], s.z[i][1], s.z[i][2];
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n);
  std::vector<double> errors;
  for (int t = 0; t < 60; ++t) {
    s = iterate(topo, s, t);
    x = pd * x;
    w = pd * w;
    CHECK(weight_sum(s) == doctest::Approx(n).epsilon(1e-6));  // Σ w_i = n (float weights)
    for (int i = 0; i < n; ++i) {
      CHECK(s.w[i] == doctest::Approx(w(i)).epsilon(1e-6));
      for (int k = 0; k < 3; ++k) {
        CHECK(s.z[i][k] == doctest::Approx(x(i, k) / w(i)).epsilon(1e-5).scale(1.0));
      }
    }
    errors.push_back(distance(s, mean));
  }
  const auto [lo, hi] = std::minmax_element(s.w.begin(), s.w.end());
  CHECK(*hi - *lo > 0.2);  // the weights carry the bias
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k)
      CHECK(s.z[i][k] == doctest::Approx(mean[k]).epsilon(1e-5).scale(1.0));
  }
  // Without de-biasing the numerators sit at n π_i z̄, away from the average.
  double x_off = 0;
  for (int i = 0; i < n; ++i) x_off = std::max(x_off, std::abs(s.w[i] * s.z[i][0] - mean[0]));
  CHECK(x_off > 1.0);
  // The rate: between t = 10 and t = 30 the error shrinks as SLEM^20 (to within 25 %: the
  // second eigenvalue's transient and its complex phase).
  const double measured = std::pow(errors[30] / errors[10], 1.0 / 20);
  CHECK(measured == doctest::Approx(lambda).epsilon(0.05));
}

TEST_CASE("EXPLICIT weights that are not column-stochastic are refused naming `weights`") {
  // Row-stochastic but not column-stochastic: node 1 takes half of node 0, node 2 all of node 0's
  // ... column 0 sums to 1.5.
  Graph g = Graph::directed(3, {{0, 1}, {0, 2}, {1, 2}, {2, 0}}).value();
  SparseMatrix w(3, 3);
  std::vector<Eigen::Triplet<double>> e = {{0, 0, 0.5}, {0, 2, 0.5},  {1, 1, 0.5}, {1, 0, 0.5},
                                           {2, 2, 0.5}, {2, 0, 0.25}, {2, 1, 0.25}};
  w.setFromTriplets(e.begin(), e.end());
  const Topology bad =
      must(Topology::from_parts("bad", std::move(g), {}, w, WeightScheme::kExplicit));
  const Status s = check_push_sum(bad);
  REQUIRE(!s.is_ok());
  CHECK(s.message().find("weights") != std::string::npos);
  CHECK(s.message().find("column 0") != std::string::npos);
  // The default scheme on the same graph is column-stochastic by construction.
  CHECK(check_push_sum(directed(3, {{0, 1}, {0, 2}, {1, 2}, {2, 0}})).is_ok());
}

}  // namespace
}  // namespace gossip::topology

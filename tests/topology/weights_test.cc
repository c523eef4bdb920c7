// Weight schemes: closed-form entries, double stochasticity as an invariant, and the local MH rule
// a daemon uses after an edge drops.
#include "topology/weights.h"

#include <doctest/doctest.h>

#include "tests/topology/test_util.h"
#include "topology/spectral.h"
#include "topology/validate.h"

namespace gossip::topology {
namespace {

Graph barbell_with_tail() {
  // Irregular: triangle 0-1-2, edge 2-3, path 3-4.
  return *Graph::undirected(5, {{0, 1}, {1, 2}, {0, 2}, {2, 3}, {3, 4}});
}

TEST_CASE("Metropolis–Hastings entries are 1/(1+max(d_i,d_j)) and W is doubly stochastic") {
  const Graph g = barbell_with_tail();
  auto w = compute_weights(g, WeightScheme::kMetropolisHastings);
  REQUIRE(w.is_ok());
  CHECK(w->coeff(0, 1) == doctest::Approx(1.0 / 3));
  CHECK(w->coeff(2, 3) == doctest::Approx(1.0 / 4));  // d_2 = 3, d_3 = 2
  CHECK(w->coeff(3, 4) == doctest::Approx(1.0 / 3));
  CHECK(w->coeff(4, 4) == doctest::Approx(2.0 / 3));
  CHECK(validate_weights(g, *w).is_ok());
}

TEST_CASE("every scheme yields a valid W on a regular graph - lazy halves the spectrum") {
  GeneratorSpec s{.kind = GeneratorKind::kRandomRegular, .nodes = 60, .degree = 3, .seed = 2};
  const Graph g = *generate_graph(s);
  for (auto scheme : {WeightScheme::kMetropolisHastings, WeightScheme::kMaxDegree,
                      WeightScheme::kUniform, WeightScheme::kLazyMetropolisHastings,
                      WeightScheme::kLazyUniform, WeightScheme::kBestConstant}) {
    CAPTURE(weight_scheme_name(scheme));
    auto w = compute_weights(g, scheme);
    REQUIRE(w.is_ok());
    CHECK(validate_weights(g, *w).is_ok());
  }
  const auto mh = *analyze_matrix(*compute_weights(g, WeightScheme::kMetropolisHastings));
  const auto lz = *analyze_matrix(*compute_weights(g, WeightScheme::kLazyMetropolisHastings));
  CHECK(lz.lambda2 == doctest::Approx((1 + mh.lambda2) / 2).epsilon(1e-12));
  CHECK(lz.lambda_n == doctest::Approx((1 + mh.lambda_n) / 2).epsilon(1e-12));
}

TEST_CASE("best constant minimises rho among W = I - alpha L (Xiao & Boyd)") {
  // Grid 4x5: compare with a scan over alpha.
  const Graph g = *generate_graph({.kind = GeneratorKind::kGrid, .rows = 4, .cols = 5});
  auto best = compute_weights(g, WeightScheme::kBestConstant);
  REQUIRE(best.is_ok());
  const double rho_best = analyze_matrix(*best)->rho;
  const double alpha_star = best->coeff(0, 1);
  for (double f : {0.8, 0.9, 0.95, 1.05, 1.1}) {
    const double a = alpha_star * f;
    std::vector<double> ew(static_cast<std::size_t>(g.num_edges()), a);
    const double rho = analyze_matrix(weights_from_edge_values(g, ew))->rho;
    CHECK(rho > rho_best - 1e-12);
  }
  // Closed form on the ring: L has eigenvalues 2 - 2cos(2 pi k / n): alpha = 2/(4 + 2 -
  // 2cos(2pi/n)) for even n.
  const Graph ring = *generate_graph({.kind = GeneratorKind::kRing, .nodes = 10});
  auto wr = compute_weights(ring, WeightScheme::kBestConstant);
  CHECK(wr->coeff(0, 1) ==
        doctest::Approx(2.0 / (4.0 + 2.0 - 2.0 * std::cos(2 * std::numbers::pi / 10)))
            .epsilon(1e-12));
}

TEST_CASE("directed graphs take uniform weights - symmetric schemes are refused") {
  const Graph e = *generate_graph({.kind = GeneratorKind::kExponential, .nodes = 12});
  auto w = compute_weights(e, WeightScheme::kDefault);
  REQUIRE(w.is_ok());
  CHECK(w->coeff(5, 4) == doctest::Approx(1.0 / 5));  // 4 -> 5, tau = 4
  CHECK(validate_weights(e, *w).is_ok());
  CHECK_FALSE(compute_weights(e, WeightScheme::kMetropolisHastings).is_ok());
}

TEST_CASE("local MH after an edge drops: both ends recompute and W stays doubly stochastic") {
  // Ring of 6; edge 2 -- 3 drops. Nodes recompute rows from announced degrees only.
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < 6; ++i)
    if (i != 2) edges.emplace_back(i, (i + 1) % 6);
  const Graph g = *Graph::undirected(6, edges);
  std::vector<Eigen::Triplet<double>> t;
  for (int i = 0; i < 6; ++i) {
    std::vector<int> nd;
    for (int j : g.out_neighbors(i)) nd.push_back(g.degree(j));
    const LocalWeights lw = local_metropolis_hastings(g.degree(i), nd);
    t.emplace_back(i, i, lw.self);
    for (std::size_t k = 0; k < nd.size(); ++k)
      t.emplace_back(i, g.out_neighbors(i)[k], lw.neighbors[k]);
  }
  SparseMatrix w(6, 6);
  w.setFromTriplets(t.begin(), t.end());
  CHECK(validate_weights(g, w).is_ok());
  const SparseMatrix global = *compute_weights(g, WeightScheme::kMetropolisHastings);
  CHECK((Eigen::MatrixXd(w) - Eigen::MatrixXd(global)).cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE("scheme names round-trip - unknown names list the choices") {
  for (auto s : {WeightScheme::kMetropolisHastings, WeightScheme::kMaxDegree,
                 WeightScheme::kUniform, WeightScheme::kLazyMetropolisHastings,
                 WeightScheme::kBestConstant, WeightScheme::kOptimized})
    CHECK(*parse_weight_scheme(weight_scheme_name(s)) == s);
  auto bad = parse_weight_scheme("metro");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("max_degree") != std::string::npos);
}

}  // namespace
}  // namespace gossip::topology

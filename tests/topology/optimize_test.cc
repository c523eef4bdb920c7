// FDLA optimizer: beats Metropolis–Hastings where it is known to, never loses to it, and returns a
// valid gossip matrix.
#include "topology/optimize.h"

#include <doctest/doctest.h>

#include "topology/spectral.h"
#include "topology/validate.h"

namespace gossip::topology {
namespace {

// Two cliques of m nodes joined by one bridge edge (m-1) -- m.
Graph barbell(int m) {
  std::vector<std::pair<int, int>> e;
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < m; ++i)
      for (int j = i + 1; j < m; ++j) e.emplace_back(side * m + i, side * m + j);
  e.emplace_back(m - 1, m);
  return *Graph::undirected(2 * m, e);
}

TEST_CASE("on a barbell the optimizer clearly beats Metropolis–Hastings") {
  const Graph g = barbell(6);
  auto r = optimize_weights(g);
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  CHECK(validate_weights(g, r->weights).is_ok());
  const auto mh = *analyze_matrix(*compute_weights(g, WeightScheme::kMetropolisHastings));
  const auto opt = *analyze_matrix(r->weights);
  CHECK(std::abs(mh.rho - r->rho_metropolis_hastings) < 1e-9);
  CHECK(std::abs(opt.rho - r->rho) < 1e-9);
  MESSAGE("barbell(6): rho MH ", mh.rho, " -> optimized ", opt.rho);
  // The bridge limits mixing: MH gives it weight 1/7, the optimum puts much more on it.
  CHECK(opt.gap > 1.5 * mh.gap);
}

TEST_CASE("never worse than Metropolis–Hastings, also where MH is already optimal-ish") {
  for (auto spec :
       {GeneratorSpec{.kind = GeneratorKind::kRing, .nodes = 12},
        GeneratorSpec{.kind = GeneratorKind::kStar, .nodes = 9},
        GeneratorSpec{.kind = GeneratorKind::kGrid, .rows = 4, .cols = 6},
        GeneratorSpec{.kind = GeneratorKind::kErdosRenyi, .nodes = 40, .p = 0.15, .seed = 4}}) {
    const Graph g = *generate_graph(spec);
    auto r = optimize_weights(g, {.max_iterations = 60});
    REQUIRE(r.is_ok());
    CHECK(r->rho <= r->rho_metropolis_hastings);
    CHECK(validate_weights(g, r->weights).is_ok());
  }
}

TEST_CASE("sparse (Lanczos) path: a random 3-regular graph above the dense threshold") {
  GeneratorSpec s{.kind = GeneratorKind::kRandomRegular, .nodes = 400, .degree = 3, .seed = 9};
  const Graph g = *generate_graph(s);
  auto r = optimize_weights(g, {.max_iterations = 30, .dense_max_nodes = 100});
  REQUIRE(r.is_ok());
  CHECK(r->rho <= r->rho_metropolis_hastings);
  CHECK(std::abs(analyze_matrix(r->weights)->rho - r->rho) < 1e-7);
}

TEST_CASE("directed or disconnected graphs are refused") {
  CHECK_FALSE(
      optimize_weights(*generate_graph({.kind = GeneratorKind::kExponential, .nodes = 8})).is_ok());
  CHECK_FALSE(optimize_weights(*Graph::undirected(4, {{0, 1}, {2, 3}})).is_ok());
}

}  // namespace
}  // namespace gossip::topology

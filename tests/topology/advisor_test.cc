// Advisor: the docs/design.md §1 cost formulas on concrete topologies, and mixing iterations.
#include "topology/advisor.h"

#include <doctest/doctest.h>

#include "tests/topology/test_util.h"

namespace gossip::topology {
namespace {

TEST_CASE("cost model: D-PSGD, parameter server and ring allreduce") {
  const auto t = testing::generated(GeneratorKind::kRing, 16);
  const auto r = *analyze(t);
  const CostModel m{.model_bytes = 1e6, .bandwidth_bytes_per_s = 1e8, .latency_s = 1e-3};
  const Advice a = advise(t, r, m);
  CHECK(a.max_degree == 2);
  CHECK(a.dpsgd_bytes_per_node == 2e6);
  CHECK(a.dpsgd_seconds == doctest::Approx(1e-3 + 2e6 / 1e8));
  CHECK(a.ps_seconds == doctest::Approx(2 * (1e-3 + 16 * 1e6 / 1e8)));
  CHECK(a.allreduce_seconds == doctest::Approx(2 * 15 * 1e-3 + 2 * 15.0 / 16 * 1e6 / 1e8));
  // rho^t <= 1e-3 exactly at the returned t and not one step earlier.
  const double rho = r.rho_per_iteration;
  CHECK(std::pow(rho, a.iterations_1000x) <= 1e-3);
  CHECK(std::pow(rho, a.iterations_1000x - 1) > 1e-3);
}

TEST_CASE("one-peer exponential sends to one peer per iteration and mixes in tau steps") {
  const auto t = testing::generated(GeneratorKind::kOnePeerExponential, 64);
  const auto r = *analyze(t);
  const Advice a = advise(t, r, CostModel{});
  CHECK(a.max_degree == 1);
  CHECK(a.iterations_1000x == t.period());  // the product over one period is J
}

}  // namespace
}  // namespace gossip::topology

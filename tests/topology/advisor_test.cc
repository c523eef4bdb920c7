// Advisor: the docs/design.md §1 cost formulas on concrete topologies, and mixing iterations.
#include "topology/advisor.h"

#include <doctest/doctest.h>

#include "tests/topology/test_util.h"
#include "topology/comm_cost.h"

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

TEST_CASE("link degree counts what a node receives as well as what it sends") {
  // W_ij != 0: node i receives node j's model. Node 0 receives from 1 and 2 and sends only to 1,
  // so every out-degree is 1 but node 0's link carries two messages in: Δ = 2. An explicit zero
  // is no edge.
  SparseMatrix w(3, 3);
  w.insert(0, 0) = 0.4;
  w.insert(0, 1) = 0.3;
  w.insert(0, 2) = 0.3;
  w.insert(1, 0) = 0.5;
  w.insert(1, 1) = 0.5;
  w.insert(2, 2) = 1.0;
  w.insert(2, 1) = 0.0;
  w.makeCompressed();
  CHECK(link_degree(w) == 2);
  CHECK(link_degree(w.transpose()) == 2);                   // sending to two peers costs the same
  const Link link{.bandwidth_bps = 8e6, .latency_s = 0.5};  // 1 MB/s
  CHECK(gossip_comm_s(link_degree(w), 1e6, link) == 2.5);
  CHECK(gossip_bytes_per_node(2, 1e6) == 2e6);
  CHECK(parameter_server_bytes(4, 1e6) == 4e6);
  CHECK(ring_allreduce_bytes_per_node(4, 1e6) == 1.5e6);
  CHECK(ring_allreduce_comm_s(1, 1e6, link) == 0.0);  // one node talks to nobody
}

}  // namespace
}  // namespace gossip::topology

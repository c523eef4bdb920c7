// Every validation rule has a topology that breaks it, and the message names the culprit.
#include "topology/validate.h"

#include <doctest/doctest.h>

#include "tests/topology/test_util.h"

namespace gossip::topology {
namespace {

using testing::generated;
using testing::must;

SparseMatrix dense_to_sparse(const Eigen::MatrixXd& d) { return d.sparseView(0.0, 0.0); }

// A 4-cycle 0-1-2-3-0 with MH weights (1/3), as a dense matrix to tamper with.
Graph cycle4() { return *Graph::undirected(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }
Eigen::MatrixXd cycle4_w() {
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(4, 4);
  for (int i = 0; i < 4; ++i) {
    w(i, i) = 1.0 / 3;
    w(i, (i + 1) % 4) = w(i, (i + 3) % 4) = 1.0 / 3;
  }
  return w;
}

std::vector<NodeAddress> loopback(int n) {
  std::vector<NodeAddress> a;
  for (int i = 0; i < n; ++i) a.push_back({"127.0.0.1", 7000 + i});
  return a;
}

Status check(const Graph& g, const Eigen::MatrixXd& w, std::vector<NodeAddress> addrs = {}) {
  auto t =
      Topology::from_parts("t", g, std::move(addrs), dense_to_sparse(w), WeightScheme::kExplicit);
  REQUIRE(t.is_ok());
  return validate(*t);
}

void rejects(const Status& s, const std::string& fragment) {
  CHECK_FALSE(s.is_ok());
  CHECK_MESSAGE(s.message().find(fragment) != std::string::npos, s.message());
}

TEST_CASE("a valid MH cycle passes") { CHECK(check(cycle4(), cycle4_w(), loopback(4)).is_ok()); }

TEST_CASE("negative weights are rejected, naming the entry") {
  Eigen::MatrixXd w = cycle4_w();
  w(0, 0) = 1.0 / 3 + 0.5;
  w(0, 1) = -1.0 / 6;
  w(1, 0) = -1.0 / 6;
  w(1, 1) = 1.0 / 3 + 0.5;
  rejects(check(cycle4(), w), "negative weight on edge");
  Eigen::MatrixXd v = cycle4_w();
  v(0, 0) = -0.1;
  v(0, 1) = v(1, 0) = 1.0 / 3 + 0.1 + 1.0 / 3;
  v(1, 1) = 1.0 - v(1, 0) - 1.0 / 3;
  rejects(check(cycle4(), v), "negative");
}

TEST_CASE("rows and columns must sum to 1 within 1e-9") {
  Eigen::MatrixXd w = cycle4_w();
  w(2, 2) += 1e-6;
  rejects(check(cycle4(), w), "row 2 of W sums to");
  // Row sums fine, a column not: a directed 3-cycle with asymmetric weights.
  const Graph g = *Graph::directed(3, {{0, 1}, {1, 2}, {2, 0}, {1, 0}});
  Eigen::MatrixXd d = Eigen::MatrixXd::Zero(3, 3);
  d(0, 0) = 0.5;
  d(0, 1) = 0.25;
  d(0, 2) = 0.25;  // 0 hears 1 and 2
  d(1, 1) = 0.5;
  d(1, 0) = 0.5;  // 1 hears 0
  d(2, 2) = 0.5;
  d(2, 1) = 0.5;  // 2 hears 1: column 1 sums to 1.25
  rejects(check(g, d), "column 1 of W sums to");
  CHECK(validate_weights(cycle4(), dense_to_sparse(cycle4_w()), 1e-9).is_ok());
  Eigen::MatrixXd tiny = cycle4_w();
  tiny(2, 2) += 1e-11;  // within tolerance
  CHECK(validate_weights(cycle4(), dense_to_sparse(tiny), 1e-9).is_ok());
}

TEST_CASE("support must lie within edges and the diagonal") {
  Eigen::MatrixXd w = cycle4_w();
  // Move weight onto the non-edge 0 -- 2 (rows/columns still sum to 1, still symmetric).
  w(0, 2) = w(2, 0) = 0.1;
  w(0, 0) -= 0.1;
  w(2, 2) -= 0.1;
  rejects(check(cycle4(), w), "there is no edge 2 -- 0");
}

TEST_CASE("undirected graphs need symmetric W") {
  // Doubly stochastic but not symmetric on the 4-cycle: rotate weight around the cycle.
  Eigen::MatrixXd w = cycle4_w();
  for (int i = 0; i < 4; ++i) {
    w(i, (i + 1) % 4) += 0.1;
    w(i, (i + 3) % 4) -= 0.1;
  }
  rejects(check(cycle4(), w), "not symmetric");
}

TEST_CASE("the graph must be connected (strongly, when directed)") {
  const Graph two = *Graph::undirected(4, {{0, 1}, {2, 3}});
  Eigen::MatrixXd w = Eigen::MatrixXd::Constant(4, 4, 0.0);
  w.block(0, 0, 2, 2).setConstant(0.5);
  w.block(2, 2, 2, 2).setConstant(0.5);
  rejects(check(two, w), "not connected");
  // Directed path 0 -> 1 -> 2 plus 0 -> 2: weakly but not strongly connected.
  const Graph path = *Graph::directed(3, {{0, 1}, {1, 2}});
  rejects(check(path, Eigen::MatrixXd::Identity(3, 3)), "not strongly connected");
}

TEST_CASE("rho < 1: the even ring with weights A/2 oscillates and is rejected") {
  const auto ring = generated(GeneratorKind::kRing, 8);
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(8, 8);
  for (int i = 0; i < 8; ++i) w(i, (i + 1) % 8) = w(i, (i + 7) % 8) = 0.5;
  rejects(check(ring.graph(), w), "oscillates");
  // The odd ring with A/2 is aperiodic: accepted.
  const auto odd = generated(GeneratorKind::kRing, 7);
  Eigen::MatrixXd v = Eigen::MatrixXd::Zero(7, 7);
  for (int i = 0; i < 7; ++i) v(i, (i + 1) % 7) = v(i, (i + 6) % 7) = 0.5;
  CHECK(check(odd.graph(), v).is_ok());
}

TEST_CASE("addresses: unique, with valid ports") {
  auto a = loopback(4);
  a[3] = a[1];
  rejects(check(cycle4(), cycle4_w(), a), "already used");
  auto b = loopback(4);
  b[2].port = 70000;
  rejects(check(cycle4(), cycle4_w(), b), "outside 1..65535");
  auto c = loopback(4);
  c[0].host = "";
  rejects(check(cycle4(), cycle4_w(), c), "empty host");
  CHECK_FALSE(parse_address("127.0.0.1").is_ok());
  CHECK_FALSE(parse_address("127.0.0.1:0").is_ok());
  CHECK_FALSE(parse_address("::1:7000").is_ok());
  CHECK(parse_address("[::1]:7000")->host == "::1");
  CHECK(parse_address("node-3.cluster:7003")->port == 7003);
}

TEST_CASE("uniform weights on an irregular graph fail - on a regular directed graph they pass") {
  GeneratorSpec s;
  s.kind = GeneratorKind::kStar;
  s.nodes = 5;
  CHECK_FALSE(Topology::generate(s, WeightScheme::kUniform).is_ok());
  CHECK(validate(generated(GeneratorKind::kExponential, 10)).is_ok());
}

TEST_CASE("time-varying schedules are validated at every iteration and by their product") {
  const auto t = generated(GeneratorKind::kOnePeerExponential, 16);
  SpectralReport rep;
  CHECK(validate(t, {}, &rep).is_ok());
  CHECK(rep.period == 4);
}

}  // namespace
}  // namespace gossip::topology

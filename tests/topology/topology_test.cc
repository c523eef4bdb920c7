// Topology: neighbour queries the daemon uses, the time-varying schedule, fingerprints.
#include "topology/topology.h"

#include <doctest/doctest.h>

#include "tests/topology/test_util.h"
#include "topology/validate.h"

namespace gossip::topology {
namespace {

using testing::generated;

TEST_CASE("in/out neighbours with weights on an undirected ring") {
  const auto t = generated(GeneratorKind::kRing, 8);
  const auto in = t.in_neighbors(0);
  REQUIRE(in.size() == 2);
  CHECK(in[0].node == 1);
  CHECK(in[1].node == 7);
  CHECK(in[0].weight == 1.0 / 3);
  CHECK(t.self_weight(0) == doctest::Approx(1.0 / 3));
  CHECK(t.out_neighbors(0).size() == 2);
  CHECK(t.addresses()[5].to_string() == "127.0.0.1:7005");
  CHECK_FALSE(t.is_time_varying());
  CHECK(&t.mixing_matrix(0) == &t.mixing_matrix(12345));
}

TEST_CASE("directed exponential graph: node i hears i - 2^k and sends to i + 2^k") {
  const auto t = generated(GeneratorKind::kExponential, 16);
  std::vector<int> in, out;
  for (auto nb : t.in_neighbors(5)) in.push_back(nb.node);
  for (auto nb : t.out_neighbors(5)) out.push_back(nb.node);
  CHECK(in == std::vector<int>{1, 3, 4, 13});   // 5-1, 5-2, 5-4, 5-8 mod 16
  CHECK(out == std::vector<int>{6, 7, 9, 13});  // 5+1, 5+2, 5+4, 5+8
  for (auto nb : t.in_neighbors(5)) CHECK(nb.weight == doctest::Approx(0.2));
}

TEST_CASE("one-peer exponential: one in- and one out-neighbour per iteration, period tau") {
  const auto t = generated(GeneratorKind::kOnePeerExponential, 32);
  CHECK(t.is_time_varying());
  CHECK(t.period() == 5);
  for (std::int64_t it = 0; it < 12; ++it) {
    const int hop = 1 << (it % 5);
    const auto in = t.in_neighbors(3, it), out = t.out_neighbors(3, it);
    REQUIRE(in.size() == 1);
    REQUIRE(out.size() == 1);
    CHECK(in[0].node == (3 - hop + 32) % 32);
    CHECK(out[0].node == (3 + hop) % 32);
    CHECK(in[0].weight == 0.5);
    CHECK(t.self_weight(3, it) == 0.5);
  }
  CHECK(validate(t).is_ok());
}

TEST_CASE("fingerprints: equal for equal topologies, different for any change") {
  const auto a = generated(GeneratorKind::kRing, 16);
  const auto b = generated(GeneratorKind::kRing, 16);
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.fingerprint() != generated(GeneratorKind::kRing, 17).fingerprint());
  CHECK(a.fingerprint() !=
        generated(GeneratorKind::kRing, 16, WeightScheme::kLazyMetropolisHastings).fingerprint());
  GeneratorSpec s{.kind = GeneratorKind::kRing, .nodes = 16};
  CHECK(a.fingerprint() ==
        Topology::generate(s, WeightScheme::kDefault, "127.0.0.1", 7000)->fingerprint());
  CHECK(a.fingerprint() !=
        Topology::generate(s, WeightScheme::kDefault, "10.0.0.1", 7000)->fingerprint());
  CHECK(a.fingerprint() != Topology::generate(s, WeightScheme::kDefault)->fingerprint());
  CHECK(a.fingerprint() !=
        Topology::generate(s, WeightScheme::kDefault, "127.0.0.1", 7001)->fingerprint());
  // One weight changed in the last bit.
  SparseMatrix w = a.mixing_matrix();
  w.coeffRef(0, 0) = std::nextafter(w.coeff(0, 0), 1.0);
  auto c = Topology::from_parts(a.name(), a.graph(), a.addresses(), w, WeightScheme::kExplicit);
  CHECK(c->fingerprint() != a.fingerprint());
}

TEST_CASE("generate refuses what cannot work") {
  GeneratorSpec s{.kind = GeneratorKind::kRing, .nodes = 100};
  CHECK_FALSE(Topology::generate(s, WeightScheme::kExplicit).is_ok());
  CHECK_FALSE(Topology::generate(s, WeightScheme::kDefault, "h", 65500).is_ok());
  GeneratorSpec o{.kind = GeneratorKind::kOnePeerExponential, .nodes = 8};
  CHECK_FALSE(Topology::generate(o, WeightScheme::kMetropolisHastings).is_ok());
}

TEST_CASE("row-major copy equals Eigen's conversion for every scheme on undirected generators") {
  using RowMatrix = Eigen::SparseMatrix<double, Eigen::RowMajor>;
  for (auto scheme : {WeightScheme::kMetropolisHastings, WeightScheme::kMaxDegree,
                      WeightScheme::kLazyMetropolisHastings, WeightScheme::kBestConstant,
                      WeightScheme::kOptimized}) {
    for (auto spec :
         {GeneratorSpec{.kind = GeneratorKind::kErdosRenyi, .nodes = 30, .p = 0.3, .seed = 2},
          GeneratorSpec{.kind = GeneratorKind::kGrid, .rows = 3, .cols = 5}}) {
      auto t = Topology::generate(spec, scheme);
      if (!t.is_ok()) continue;  // e.g. best-constant with a negative self weight is fine to skip
      const RowMatrix want = t->mixing_matrix();
      const RowMatrix& got = t->mixing_matrix_rows();
      REQUIRE(got.nonZeros() == want.nonZeros());
      for (int i = 0; i < want.outerSize(); ++i) {
        RowMatrix::InnerIterator a(want, i), b(got, i);
        for (; a && b; ++a, ++b) {
          CHECK(a.col() == b.col());
          CHECK(a.value() == b.value());
        }
        CHECK((!a && !b));
      }
    }
  }
  // Uniform on a regular graph, lazy uniform on a hypercube.
  for (auto scheme : {WeightScheme::kUniform, WeightScheme::kLazyUniform}) {
    auto t = Topology::generate(
        {.kind = GeneratorKind::kRandomRegular, .nodes = 40, .degree = 3, .seed = 5}, scheme);
    REQUIRE(t.is_ok());
    const RowMatrix want = t->mixing_matrix();
    CHECK((RowMatrix(want - t->mixing_matrix_rows())).norm() == 0.0);
  }
}

}  // namespace
}  // namespace gossip::topology

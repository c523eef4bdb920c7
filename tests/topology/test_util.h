// Shared helpers for the topology tests: dense references and tiny graph builders.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <numbers>

#include "topology/topology.h"

namespace gossip::topology::testing {

inline Topology must(Result<Topology> t) {
  if (!t.is_ok()) throw std::runtime_error(t.status().to_string());
  return std::move(t).value();
}

inline Topology generated(GeneratorKind kind, int n, WeightScheme scheme = WeightScheme::kDefault) {
  GeneratorSpec s;
  s.kind = kind;
  s.nodes = n;
  return must(Topology::generate(s, scheme, "127.0.0.1", n <= 50000 ? 7000 : 0));
}

inline Topology torus(int rows, int cols, WeightScheme scheme = WeightScheme::kDefault) {
  GeneratorSpec s;
  s.kind = GeneratorKind::kTorus;
  s.rows = rows;
  s.cols = cols;
  return must(Topology::generate(s, scheme));
}

// Independent dense reference: ||W - J||_2 by Jacobi SVD.
inline double dense_rho(const SparseMatrix& w) {
  Eigen::MatrixXd d = Eigen::MatrixXd(w);
  d.array() -= 1.0 / static_cast<double>(w.rows());
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(d);
  return svd.singularValues()(0);
}

inline double rel_err(double got, double want) { return std::abs(got - want) / std::abs(want); }

}  // namespace gossip::topology::testing

// Rows of W on the present subgraph (present_weights.h).
#include "topology/present_weights.h"

#include "topology/weights.h"

namespace gossip::topology {

bool mixing_is_symmetric(const Topology& topology) {
  for (int t = 0; t < topology.period(); ++t) {
    const SparseMatrix& w = topology.mixing_matrix(t);
    for (int k = 0; k < w.outerSize(); ++k) {
      for (SparseMatrix::InnerIterator e(w, k); e; ++e) {
        if (e.row() != e.col() && w.coeff(e.col(), e.row()) != e.value()) return false;
      }
    }
  }
  return true;
}

bool uses_metropolis_hastings(const Topology& topology, int node) {
  if (topology.is_time_varying() || topology.is_directed()) return false;
  const WeightScheme s = topology.weight_scheme();
  if (s != WeightScheme::kMetropolisHastings && s != WeightScheme::kDefault) {
    return false;
  }
  // The rule must reproduce the topology's row bit for bit when nothing failed.
  const int d = topology.graph().degree(node);
  double off = 0.0;
  for (const Neighbor& nb : topology.in_neighbors(node, 0)) {
    const double w = metropolis_hastings_weight(d, topology.graph().degree(nb.node));
    if (w != nb.weight) return false;
    off += w;
  }
  return 1.0 - off == topology.self_weight(node, 0);
}

RowWeights row_weights(const Topology& topology, int node, std::int64_t iteration,
                       bool metropolis_hastings, std::uint32_t planned_degree,
                       const std::map<int, std::uint32_t>& used) {
  RowWeights out;
  if (metropolis_hastings) {
    double off = 0.0;
    for (const auto& [j, dj] : used) {
      const double w =
          metropolis_hastings_weight(static_cast<int>(planned_degree), static_cast<int>(dj));
      out.neighbours.emplace_back(j, w);
      off += w;
    }
    out.self = 1.0 - off;
    return out;
  }
  out.self = topology.self_weight(node, iteration);
  for (const Neighbor& nb : topology.in_neighbors(node, iteration)) {
    if (used.count(nb.node)) {
      out.neighbours.emplace_back(nb.node, nb.weight);
    } else {
      out.self += nb.weight;
    }
  }
  return out;
}

std::vector<std::pair<int, double>> RowWeights::row(int node) const {
  std::vector<std::pair<int, double>> r;
  bool self_added = false;
  for (const auto& [j, w] : neighbours) {
    if (!self_added && j > node) {
      if (self != 0.0) r.emplace_back(node, self);
      self_added = true;
    }
    if (w != 0.0) r.emplace_back(j, w);
  }
  if (!self_added && self != 0.0) r.emplace_back(node, self);
  return r;
}

}  // namespace gossip::topology

// Validation rules, cheapest first, so that a broken file fails fast and with the most specific
// message: addresses, then each W(t) entry by entry, then connectivity, then the spectrum — unless
// Perron–Frobenius already decides it (spectrum_follows_from_structure).
#include "topology/validate.h"

#include <cmath>
#include <set>
#include <sstream>
#include <unordered_set>
#include <vector>

namespace gossip::topology {
namespace {

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string at_iteration(int t, int period) {
  return period > 1 ? " of W(" + std::to_string(t) + ")" : "";
}

}  // namespace

bool spectrum_follows_from_structure(const Topology& topology) {
  if (topology.is_directed() || topology.period() != 1) return false;
  const SparseMatrix& w = topology.mixing_matrix(0);
  const int n = static_cast<int>(w.cols());
  // Aperiodic: every W_ii > 0. Irreducible: the graph of W's positive entries is connected (BFS
  // from node 0; W is symmetric, so column j lists j's neighbours).
  std::vector<char> self_weight(static_cast<std::size_t>(n), 0), seen(self_weight);
  for (int j = 0; j < n; ++j) {
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      if (it.row() == j && it.value() > 0.0) self_weight[static_cast<std::size_t>(j)] = 1;
    }
  }
  for (char c : self_weight) {
    if (!c) return false;
  }
  std::vector<int> queue{0};
  seen[0] = 1;
  for (std::size_t k = 0; k < queue.size(); ++k) {
    for (SparseMatrix::InnerIterator it(w, queue[k]); it; ++it) {
      const auto i = static_cast<std::size_t>(it.row());
      if (it.value() > 0.0 && !seen[i]) {
        seen[i] = 1;
        queue.push_back(static_cast<int>(i));
      }
    }
  }
  return static_cast<int>(queue.size()) == n;
}

Status validate_weights(const Graph& graph, const SparseMatrix& w, double tolerance) {
  const int n = graph.num_nodes();
  if (w.rows() != n || w.cols() != n)
    return invalid_argument("W is " + std::to_string(w.rows()) + "x" + std::to_string(w.cols()) +
                            " for " + std::to_string(n) + " nodes");
  std::vector<double> row_sum(static_cast<std::size_t>(n), 0.0), col_sum(row_sum);
  for (int j = 0; j < n; ++j)
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      const int i = static_cast<int>(it.row());
      const double v = it.value();
      // Formatted only for the message: once per entry it was most of a large W's validation.
      const auto entry = [&] {
        return "W[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + num(v);
      };
      if (!std::isfinite(v)) return invalid_argument(entry() + " is not finite");
      if (v < 0.0) {
        if (i == j)
          return invalid_argument(entry() + ": negative self weight of node " + std::to_string(i) +
                                  " (its neighbour weights sum to more than 1)");
        return invalid_argument(entry() + ": negative weight on edge " + std::to_string(j) +
                                " -> " + std::to_string(i));
      }
      if (v != 0.0 && i != j && !graph.has_arc(j, i))
        return invalid_argument(entry() + ": node " + std::to_string(i) + " weights node " +
                                std::to_string(j) + " but there is no " +
                                (graph.is_directed()
                                     ? "arc " + std::to_string(j) + " -> " + std::to_string(i)
                                     : "edge " + std::to_string(i) + " -- " + std::to_string(j)));
      row_sum[i] += v;
      col_sum[j] += v;
    }
  for (int i = 0; i < n; ++i) {
    if (std::abs(row_sum[i] - 1.0) > tolerance)
      return invalid_argument("row " + std::to_string(i) + " of W sums to " + num(row_sum[i]) +
                              ", not 1 (node " + std::to_string(i) +
                              "'s weights must average, tolerance " + num(tolerance) + ")");
    if (std::abs(col_sum[i] - 1.0) > tolerance)
      return invalid_argument("column " + std::to_string(i) + " of W sums to " + num(col_sum[i]) +
                              ", not 1 (W is not doubly stochastic: node " + std::to_string(i) +
                              "'s value gets total weight " + num(col_sum[i]) +
                              " and the average drifts)");
  }
  if (!graph.is_directed()) {
    const SparseMatrix t = w.transpose();
    const SparseMatrix diff = w - t;
    for (int j = 0; j < n; ++j)
      for (SparseMatrix::InnerIterator it(diff, j); it; ++it)
        if (std::abs(it.value()) > tolerance)
          return invalid_argument("W is not symmetric on an undirected graph: W[" +
                                  std::to_string(it.row()) + "][" + std::to_string(j) + "] = " +
                                  num(w.coeff(it.row(), j)) + " but W[" + std::to_string(j) + "][" +
                                  std::to_string(it.row()) + "] = " + num(w.coeff(j, it.row())));
  }
  return Status::ok();
}

Status validate(const Topology& topology, const ValidationOptions& options,
                SpectralReport* report) {
  const int n = topology.num_nodes();
  if (n <= 0) return invalid_argument("topology has no nodes");
  const auto& addrs = topology.addresses();
  if (!addrs.empty()) {
    if (static_cast<int>(addrs.size()) != n)
      return invalid_argument(std::to_string(addrs.size()) + " addresses for " + std::to_string(n) +
                              " nodes");
    std::unordered_set<std::string> seen;
    for (int i = 0; i < n; ++i) {
      const auto& a = addrs[static_cast<std::size_t>(i)];
      if (a.host.empty()) return invalid_argument("node " + std::to_string(i) + ": empty host");
      if (a.port < 1 || a.port > 65535)
        return invalid_argument("node " + std::to_string(i) + ": port " + std::to_string(a.port) +
                                " outside 1..65535");
      if (!seen.insert(a.to_string()).second)
        return invalid_argument("node " + std::to_string(i) + ": address " + a.to_string() +
                                " is already used by another node");
    }
  }
  for (int t = 0; t < topology.period(); ++t) {
    Status s = validate_weights(topology.graph(), topology.mixing_matrix(t), options.tolerance);
    if (!s.is_ok()) return invalid_argument(s.message() + at_iteration(t, topology.period()));
  }
  if (!topology.graph().is_connected())
    return invalid_argument(topology.is_directed()
                                ? "graph is not strongly connected: some node's model never "
                                  "reaches some other node"
                                : "graph is not connected: its parts can never agree");
  // Where the structure already proves rho < 1 and nobody asked for the report, the spectral
  // analysis (a Lanczos run, most of the time of a large `gossip-topo generate`) is skipped.
  if (options.check_spectrum && (report != nullptr || !spectrum_follows_from_structure(topology))) {
    GOSSIP_ASSIGN_OR_RETURN(SpectralReport rep, analyze(topology, options.spectral));
    if (!(rep.gap > 0.0) || !(rep.rho < 1.0)) {
      std::string why;
      if (rep.symmetric && rep.one_plus_lambda_n <= options.tolerance)
        why = ": lambda_n = " + num(rep.lambda_n) +
              ", so gossip oscillates instead of converging (the graph is bipartite and W has "
              "zero self weights; use lazy or Metropolis–Hastings weights)";
      else if (rep.symmetric)
        why = ": lambda_2 = " + num(rep.lambda2) + ", so gossip never converges";
      return invalid_argument("rho = ||W - J||_2 = " + num(rep.rho) + " is not below 1" + why +
                              " [" + std::string(spectral_method_name(rep.method)) + "]");
    }
    if (report) *report = rep;
  }
  return Status::ok();
}

}  // namespace gossip::topology

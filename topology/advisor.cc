// Advisor: the cost model of docs/design.md §1 evaluated on a concrete topology.
#include "topology/advisor.h"

#include <algorithm>
#include <cmath>

namespace gossip::topology {

Advice advise(const Topology& topology, const SpectralReport& report, const CostModel& m) {
  Advice a;
  const int n = topology.num_nodes();
  a.num_nodes = n;
  // Out-degree in W(t) (entries with nonzero weight), the worst node and iteration: what a node
  // actually sends, which for the one-peer exponential graph is 1 although its union graph has
  // degree log2 n.
  int deg = 0;
  for (int t = 0; t < topology.period(); ++t) {
    const auto& w = topology.mixing_matrix(t);
    for (int j = 0; j < n; ++j) {
      int d = 0;
      for (SparseMatrix::InnerIterator it(w, j); it; ++it) d += it.row() != j && it.value() != 0.0;
      deg = std::max(deg, d);
    }
  }
  a.max_degree = deg;
  const double M = m.model_bytes, B = m.bandwidth_bytes_per_s, alpha = m.latency_s;
  a.dpsgd_bytes_per_node = deg * M;
  a.dpsgd_seconds = alpha + deg * M / B;
  a.ps_server_bytes = n * M;
  a.ps_seconds = 2.0 * (alpha + n * M / B);
  a.allreduce_bytes_per_node = n > 1 ? 2.0 * (n - 1) / n * M : 0.0;
  a.allreduce_seconds = n > 1 ? 2.0 * (n - 1) * alpha + 2.0 * (n - 1.0) / n * M / B : 0.0;
  a.gap_per_iteration = report.gap_per_iteration;
  // Time-varying schedules contract by rho only over a whole period, so count whole periods:
  // rho_period^m <= 1e-3, iterations = m * period.
  const double gap = report.period > 1 ? report.gap : report.gap_per_iteration;
  const std::int64_t per = std::max(1, report.period);
  if (!(gap > 0.0)) {
    a.iterations_1000x = -1;
  } else if (gap >= 1.0) {
    a.iterations_1000x = per;
  } else {
    // rho^t <= 1e-3  <=>  t >= ln(1000) / -ln(rho), with ln(rho) = log1p(-gap) for tiny gaps.
    a.iterations_1000x =
        per * static_cast<std::int64_t>(std::ceil(std::log(1000.0) / -std::log1p(-gap)));
  }
  return a;
}

}  // namespace gossip::topology

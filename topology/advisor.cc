// Advisor: the communication cost (topology/comm_cost.h) and mixing time of a concrete topology.
#include "topology/advisor.h"

#include <algorithm>
#include <cmath>

#include "topology/comm_cost.h"

namespace gossip::topology {

Advice advise(const Topology& topology, const SpectralReport& report, const CostModel& m) {
  Advice a;
  const int n = topology.num_nodes();
  a.num_nodes = n;
  // Δ of the matrices actually applied, W(t): for the one-peer exponential graph 1, although its
  // union graph has degree log2 n.
  const int deg = max_link_degree(topology);
  a.max_degree = deg;
  // B in bytes/s on the command line; the shared model takes bits/s (×8 and /8 are exact).
  const Link link{.bandwidth_bps = 8.0 * m.bandwidth_bytes_per_s, .latency_s = m.latency_s};
  const double M = m.model_bytes;
  a.dpsgd_bytes_per_node = gossip_bytes_per_node(deg, M);
  a.dpsgd_seconds = gossip_comm_s(deg, M, link);
  a.ps_server_bytes = parameter_server_bytes(n, M);
  a.ps_seconds = parameter_server_comm_s(n, M, link);
  a.allreduce_bytes_per_node = ring_allreduce_bytes_per_node(n, M);
  a.allreduce_seconds = ring_allreduce_comm_s(n, M, link);
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

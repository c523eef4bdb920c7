// Advisor: what a topology costs per iteration and how fast it mixes. The seconds and bytes are
// topology/comm_cost.h's (Lian et al. 2017 Table 1, docs/design.md §1), the model gossip-sim
// prices with, evaluated for message M, bandwidth B and latency alpha on the topology's Δ; and the
// iterations of pure gossip to shrink the consensus error 1000x: ceil(ln 1000 / -ln rho) (whole
// periods of the product for time-varying schedules).
#pragma once

#include <cstdint>

#include "topology/spectral.h"
#include "topology/topology.h"

namespace gossip::topology {

struct CostModel {
  double model_bytes = 4.0e6;              // M
  double bandwidth_bytes_per_s = 125.0e6;  // B (1 Gbit/s)
  double latency_s = 1.0e-3;               // alpha
};

struct Advice {
  int num_nodes = 0;
  int max_degree = 0;               // Δ: max over iterations of link_degree(W(t))
  double dpsgd_bytes_per_node = 0;  // sent per node per iteration (max over nodes)
  double dpsgd_seconds = 0;
  double ps_seconds = 0;
  double ps_server_bytes = 0;  // moved by the server each way
  double allreduce_seconds = 0;
  double allreduce_bytes_per_node = 0;
  double gap_per_iteration = 0;
  std::int64_t iterations_1000x = 0;  // -1: never (rho >= 1)
};

Advice advise(const Topology& topology, const SpectralReport& report, const CostModel& model);

}  // namespace gossip::topology

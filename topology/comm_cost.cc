// Communication cost: Lian et al. 2017 Table 1, written once for the advisor and the simulator.
#include "topology/comm_cost.h"

#include <algorithm>
#include <vector>

namespace gossip::topology {

double parameter_server_comm_s(int num_nodes, double message_bytes, const Link& link) {
  // Every worker pushes M and pulls M; the server's single link carries n·M each way.
  return 2.0 * (link.latency_s + num_nodes * message_bytes / link.bytes_per_second());
}

double ring_allreduce_comm_s(int num_nodes, double message_bytes, const Link& link) {
  // Reduce-scatter then all-gather: 2(n−1) steps, each moving M/n bytes per link.
  const double n = num_nodes;
  return 2.0 * (n - 1) * link.latency_s +
         2.0 * ((n - 1) / n) * message_bytes / link.bytes_per_second();
}

double gossip_comm_s(int link_degree, double message_bytes, const Link& link) {
  return link.latency_s + link_degree * message_bytes / link.bytes_per_second();
}

double parameter_server_bytes(int num_nodes, double message_bytes) {
  return num_nodes * message_bytes;
}

double ring_allreduce_bytes_per_node(int num_nodes, double message_bytes) {
  const double n = num_nodes;
  return 2.0 * ((n - 1) / n) * message_bytes;
}

double gossip_bytes_per_node(int link_degree, double message_bytes) {
  return link_degree * message_bytes;
}

int link_degree(const SparseMatrix& w) {
  // Column-major: column j lists the nodes i that receive node j's model (W_ij != 0).
  const auto n = static_cast<int>(w.cols());
  std::vector<int> in(static_cast<std::size_t>(n), 0);
  int degree = 0;
  for (int j = 0; j < n; ++j) {
    int out = 0;
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      // Explicit zeros are not edges.
      if (it.row() == j || it.value() == 0.0) continue;
      ++out;
      ++in[static_cast<std::size_t>(it.row())];
    }
    degree = std::max(degree, out);
  }
  for (int d : in) degree = std::max(degree, d);
  return degree;
}

int max_link_degree(const Topology& topology) {
  int degree = 0;
  for (int t = 0; t < topology.period(); ++t) {
    degree = std::max(degree, link_degree(topology.mixing_matrix(t)));
  }
  return degree;
}

}  // namespace gossip::topology

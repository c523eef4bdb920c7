// Communication cost of one iteration (Lian et al., NeurIPS 2017, Table 1; docs/design.md §1):
// the one closed form that `gossip-topo analyze` (topology/advisor.h) and `gossip-sim`
// (sim/cost_model.h) both price with, so the two tools print the same seconds for the same
// topology, message and link.
//
//   C-PSGD, parameter server:  2(α + n·M/B)                  (the server's link moves n·M each way)
//   C-PSGD, ring allreduce:    2(n−1)α + 2((n−1)/n)·M/B      (reduce-scatter, then all-gather)
//   D-PSGD:                    α + Δ·M/B                     (overlaps the gradient computation)
//
// M is the message (model) size in bytes, B the link bandwidth in bytes/s, α the one-way latency
// in seconds, and Δ the link degree of the iteration's mixing matrix: the largest number of
// neighbours a node sends to or receives from (nonzero off-diagonal entries of its column or
// row), since each node has one full-duplex link. Pure functions, thread-safe.
#pragma once

#include "topology/topology.h"
#include "topology/weights.h"

namespace gossip::topology {

// One full-duplex link per node.
struct Link {
  double bandwidth_bps = 1e9;  // bits per second
  double latency_s = 1e-3;     // one-way, seconds
  // Payload bytes per byte on the wire: TCP/IP/Ethernet framing takes the rest (1448/1514 on a
  // 1500-byte MTU with TCP timestamps). 1 prices payload at the nominal rate, as Table 1 does.
  double payload_fraction = 1.0;

  // Payload bytes per second.
  double bytes_per_second() const { return bandwidth_bps / 8.0 * payload_fraction; }
};

// Seconds of communication per iteration (no compute).
double parameter_server_comm_s(int num_nodes, double message_bytes, const Link& link);
double ring_allreduce_comm_s(int num_nodes, double message_bytes, const Link& link);
double gossip_comm_s(int link_degree, double message_bytes, const Link& link);

// Bytes per iteration: through the parameter server's link (each way), over each node's link in
// ring allreduce (each way), and sent by the busiest node in D-PSGD.
double parameter_server_bytes(int num_nodes, double message_bytes);
double ring_allreduce_bytes_per_node(int num_nodes, double message_bytes);
double gossip_bytes_per_node(int link_degree, double message_bytes);

// Δ of one mixing matrix W (W_ij: the weight node i gives node j's model): the largest, over
// nodes, of the nonzero off-diagonal entries in its row (receives) or its column (sends).
int link_degree(const SparseMatrix& w);
// The largest link_degree of W(t) over one period.
int max_link_degree(const Topology& topology);

}  // namespace gossip::topology

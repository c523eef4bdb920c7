// W(t) restricted to the nodes present at t: the rows a node mixes with when some of its
// neighbours are not there (dropped under the carry-on fault policy, a standby node not yet
// joined, a node that left). gossipd's membership (daemon/membership.h) and gossip-sim's joins and
// leaves (sim/simulator.h) both build their rows here, so the two agree bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "topology/topology.h"

namespace gossip::topology {

// Whether every W(t) of the topology is symmetric (bit for bit): carry-on needs it.
bool mixing_is_symmetric(const Topology& topology);
// Whether node's row of W is the Metropolis–Hastings rule of its degrees, bit for bit (static,
// undirected, scheme metropolis_hastings or default): then rows are recomputed from degrees.
bool uses_metropolis_hastings(const Topology& topology, int node);

// Node i's row of W(t) under the carry-on policy, for the edges `used` at t (neighbour -> its
// planned degree d_j(t)). Metropolis–Hastings: W_ij = 1/(1 + max(d_i(t), d_j(t))), W_ii = 1 − Σ
// (summed in increasing j, as the topology does). Other schemes: the topology's W_ij for used
// edges, and the weight of every other neighbour of W(t) moved onto W_ii.
struct RowWeights {
  double self = 1.0;
  std::vector<std::pair<int, double>> neighbours;  // increasing id
  // Every nonzero entry including the diagonal, ids increasing (the metrics "row").
  std::vector<std::pair<int, double>> row(int node) const;
};
RowWeights row_weights(const Topology& topology, int node, std::int64_t iteration,
                       bool metropolis_hastings, std::uint32_t planned_degree,
                       const std::map<int, std::uint32_t>& used);

}  // namespace gossip::topology

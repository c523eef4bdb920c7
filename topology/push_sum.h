// Push-sum weights (Kempe, Dobra & Gehrke, FOCS 2003; as Stochastic Gradient Push: Nedić &
// Olshevsky 2016, Assran et al. ICML 2019, arXiv 1811.10792): the column-stochastic mixing
// matrix P(t) of a topology and the arithmetic one node applies at one iteration, shared by
// gossipd's PUSH_SUM (algorithms/push_sum.h) and gossip-sim's push_sum (sim/simulator.h) so the
// two round alike, bit for bit. docs/design.md §1 ("Push-sum") states the recursion.
//
// P(t) has the support of the topology's W(t) (j sends to i at t iff W_ij(t) > 0, or i == j).
// Its entries: p_ij(t) = 1 / (1 + |N_out(j, t)|) — node j splits its mass uniformly over its
// out-neighbours and itself, so every column sums to 1 whatever the in-degrees (directed and
// non-regular graphs) — or, for a topology with weights: EXPLICIT, W(t) itself, which must then be
// column-stochastic (check_push_sum).
//
// Node i keeps (z_i, w_i), the de-biased parameters and the push-sum weight; the numerator is
// x_i = w_i z_i. One iteration, combine-then-adapt:
//   w_i' = Σ_j p_ij w_j,   z_i' = (Σ_j p_ij w_j z_j − γ u_i) / w_i'
// i.e. z_i' = Σ_j c_ij z_j − (γ / w_i') u_i with c_ij = p_ij w_j / w_i' (Σ_j c_ij = 1): the
// D-PSGD mix with a row that depends on the neighbours' weights. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"

namespace gossip::topology {

// InvalidArgument, naming `weights`, the iteration and the column, when the topology's weights are
// EXPLICIT and some column of some W(t) does not sum to 1 (within 1e-9); ok otherwise (the other
// schemes take P(t) from the out-degrees, column-stochastic by construction).
Status check_push_sum(const Topology& topology);

// Row i of P(t): (j, p_ij(t)) for j ∈ N_in(i, t) ∪ {i}, j increasing.
std::vector<std::pair<int, double>> push_sum_row(const Topology& topology, int i,
                                                 std::int64_t iteration);
// p_ij(t): node j's entry in row i of P(t) (push_sum_row), 0 when j does not send to i at t.
double push_sum_entry(const Topology& topology, int i, int j, std::int64_t iteration);
// P(t), n × n (for analysis and tests: its spectrum gives push-sum's rate).
SparseMatrix push_sum_matrix(const Topology& topology, std::int64_t iteration);

// Asynchronous push-sum (algorithms/async_push_sum.h), where every node runs on its own clock:
// the most iterations between two consecutive messages on one edge j → i of the topology, over its
// period (cyclically; 1 for a static graph, log2 n for the one-peer exponential graph). A node that
// waits for an in-neighbour after fewer iterations than this without a message would wait at
// every period even in lock step. 0 for a topology without edges.
std::int64_t push_sum_edge_gap(const Topology& topology);
// The last iteration s < `total` at which j sends to i (i ∈ N_out(j, s)), or −1 when it never does
// (j is not an in-neighbour of i at any time of the period, or total ≤ 0).
std::int64_t push_sum_last_send(const Topology& topology, int j, int i, std::int64_t total);

// Node i's combination at one iteration (see the file comment).
struct PushSumMix {
  double weight_sum = 0;  // w_i' = Σ_j p_ij w_j, summed in double in increasing j
  float weight = 0;       // w_i' as kept and sent (float32)
  double self = 0;        // c_ii
  std::vector<std::pair<int, double>> neighbours;  // (j, c_ij), j increasing, j != i
  // The learning rate applied to u_i: fl(γ / w_i').
  float scaled_gamma(float gamma) const {
    return static_cast<float>(static_cast<double>(gamma) / weight_sum);
  }
};
// From row i of P(t) (push_sum_row) and each term's w_j (weights[k] belongs to row[k]); every
// w_j must be > 0 (push-sum weights stay positive).
PushSumMix push_sum_mix(int i, std::span<const std::pair<int, double>> row,
                        std::span<const float> weights);

}  // namespace gossip::topology

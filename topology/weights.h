// Mixing weights: from a graph to a doubly-stochastic W (docs/design.md §1, "Weight schemes").
//
// Convention everywhere in gossip-sgd: row i of W holds the weights node i applies,
// x_i <- sum_j W_ij x_j, so W_ij > 0 needs an arc j -> i (j sends to i) or i == j.
// Metropolis–Hastings and uniform need only local degrees: local_metropolis_hastings() is what a
// daemon calls after an edge drops (both ends recompute from the degrees they announce, and W
// stays symmetric and doubly stochastic).
#pragma once

#include <Eigen/SparseCore>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/graph.h"

namespace gossip::topology {

// Column-major, compressed. W(i, j) = weight node i applies to x_j.
using SparseMatrix = Eigen::SparseMatrix<double>;

enum class WeightScheme {
  kDefault,                 // Metropolis–Hastings (undirected) / uniform (directed)
  kMetropolisHastings,      // w_ij = 1/(1+max(d_i,d_j)), w_ii = 1 - sum
  kMaxDegree,               // w_ij = 1/(1+d_max)
  kUniform,                 // w_ij = 1/(1+d_i); doubly stochastic only on regular graphs
  kLazyMetropolisHastings,  // (I + W_MH)/2
  kLazyUniform,             // (I + W_uniform)/2
  kBestConstant,            // I - alpha L, alpha = 2/(lambda_1(L) + lambda_{n-1}(L)) (Xiao & Boyd)
  kExplicit,                // weights given in the topology file
  kOptimized,               // FDLA by projected subgradient (optimize.h)
};

// "metropolis_hastings" (also "mh"), "max_degree", "uniform", "lazy" (= lazy MH),
// "lazy_uniform", "best_constant", "explicit", "optimized" (also "fdla"), "default".
Result<WeightScheme> parse_weight_scheme(std::string_view name);
std::string_view weight_scheme_name(WeightScheme scheme);

// 1 / (1 + max(d_i, d_j)).
double metropolis_hastings_weight(int degree_i, int degree_j);

// Weights one node computes from its own degree and its neighbours' degrees alone.
struct LocalWeights {
  double self = 1.0;              // W_ii
  std::vector<double> neighbors;  // W_ij, in the order of neighbor_degrees
};
LocalWeights local_metropolis_hastings(int self_degree, std::span<const int> neighbor_degrees);

// W for the scheme on the graph. kDefault resolves by directedness. kExplicit and kOptimized are
// not computed here (the file / optimize.h provide them): InvalidArgument. kUniform on a directed
// graph needs equal in- and out-degrees at each node to be doubly stochastic (validate.h checks).
// Symmetric schemes on directed graphs: InvalidArgument. Best-constant solves for the Laplacian's
// extreme eigenvalues (spectral.h) and so costs an eigen-solve.
Result<SparseMatrix> compute_weights(const Graph& graph, WeightScheme scheme);
// The same into `out`, without the copies a Result<SparseMatrix> costs (Eigen 3.4's SparseMatrix
// has no move constructor, so every "move" of one copies it): what Topology::generate uses.
Status compute_weights_into(const Graph& graph, WeightScheme scheme, SparseMatrix& out);

// The Laplacian-form W = I - sum_e w_e (e_i - e_j)(e_i - e_j)^T of an undirected graph, with
// edge_weights in the order of graph.edges().
SparseMatrix weights_from_edge_values(const Graph& graph, std::span<const double> edge_weights);

// (I + W) / 2.
SparseMatrix lazy(const SparseMatrix& w);

}  // namespace gossip::topology

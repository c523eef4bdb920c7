// Optimized weights: the fastest distributed linear averaging problem (FDLA; Xiao & Boyd 2004,
// "Fast linear iterations for distributed averaging"; Boyd, Diaconis & Xiao 2004 for the
// subgradient method): minimise rho(W) = ||W - J||_2 over symmetric W = I - sum_e w_e (e_i - e_j)
// (e_i - e_j)^T supported on an undirected graph, with w_e >= 0 and W_ii >= 0 (so W stays a
// valid gossip matrix for validate.h).
//
// Projected subgradient: the subgradient of rho at w is -(u_i - u_j)^2 per edge when lambda_2
// (eigenvector u) is the binding end and +(v_i - v_j)^2 when -lambda_n (eigenvector v) is; the
// step is followed by a projection onto {w >= 0, sum_{e ∋ i} w_e <= 1}. The method starts from
// Metropolis–Hastings and returns the best iterate it evaluated, so the result is never worse
// than Metropolis–Hastings. Eigenvectors come from a dense solver for small n and from Lanczos
// (warm-started) for large sparse graphs.
#pragma once

#include <vector>

#include "common/status.h"
#include "topology/graph.h"
#include "topology/weights.h"

namespace gossip::topology {

struct OptimizeOptions {
  int max_iterations = 300;
  double initial_step = 0.0;   // 0: chosen from the MH weights (a fraction of the mean weight)
  int dense_max_nodes = 200;   // above: Lanczos eigenvectors
  double time_limit_s = 60.0;  // stop early after this much wall time
};

struct OptimizeResult {
  SparseMatrix weights;              // the best W found
  std::vector<double> edge_weights;  // in the order of graph.edges()
  double rho = 0.0;                  // its rho
  double rho_metropolis_hastings = 0.0;
  int iterations = 0;
  int best_iteration = 0;  // 0: MH itself was best
};

Result<OptimizeResult> optimize_weights(const Graph& graph, const OptimizeOptions& options = {});

}  // namespace gossip::topology

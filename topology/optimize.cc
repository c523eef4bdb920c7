// FDLA by projected subgradient (Xiao & Boyd 2004, §5; Boyd, Diaconis & Xiao 2004, §5 for the
// subgradient method on the same spectral objective). rho(w) = max(lambda_2(W), -lambda_n(W)) is
// convex in the edge weights; a subgradient comes from the eigenvector of the binding end.
// We keep nonnegative weights (validate.h requires them), which makes this the FMMC-style
// variant of FDLA; the optimum of that problem is still never worse than Metropolis–Hastings,
// and because we start at MH and keep the best iterate, neither is our answer.
#include "topology/optimize.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "topology/spectral.h"

namespace gossip::topology {
namespace {

struct Extremes {
  double lambda2 = 0.0, lambda_n = 0.0;
  Eigen::VectorXd u, v;  // unit eigenvectors, orthogonal to 1
};

Result<Extremes> extremes(const SparseMatrix& w, bool dense, const Extremes* warm) {
  const int n = static_cast<int>(w.rows());
  Extremes e;
  if (dense) {
    Eigen::MatrixXd a = Eigen::MatrixXd(w);
    a.array() -= 1.0 / n;  // deflate the all-ones direction (eigenvalue 1 -> 0)
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(a);
    if (es.info() != Eigen::Success) return internal_error("dense eigensolver failed");
    e.lambda2 = es.eigenvalues()[n - 1];
    e.lambda_n = es.eigenvalues()[0];
    e.u = es.eigenvectors().col(n - 1);
    e.v = es.eigenvectors().col(0);
    return e;
  }
  // Both ends from one unrestarted Lanczos run (spectral.h), warm-started from u + v of the
  // previous iterate, whose W differs by one small step.
  Eigen::VectorXd start;
  if (warm) start = warm->u + warm->v;
  auto r = symmetric_extremes(w, 1e-10, 20000, warm ? &start : nullptr);
  if (!r.is_ok()) return internal_error("while optimizing weights: " + r.status().message());
  e.lambda2 = r->lambda2;
  e.lambda_n = r->lambda_n;
  e.u = std::move(r->u);
  e.v = std::move(r->v);
  return e;
}

// Approximate Euclidean projection onto {w >= 0, sum_{e at i} w_e <= 1}: alternating projections
// onto the violated node halfspaces and the orthant, then a final scaling that guarantees
// feasibility (so every iterate is a valid gossip matrix).
void project(const std::vector<std::pair<int, int>>& edges, int n, std::vector<double>& w) {
  // A hair below 1, so that W_ii = 1 - sum, computed in floating point, never comes out -1e-17.
  constexpr double kCap = 1.0 - 1e-12;
  std::vector<double> sum(static_cast<std::size_t>(n));
  std::vector<int> deg(static_cast<std::size_t>(n));
  for (int round = 0; round < 50; ++round) {
    for (double& x : w) x = std::max(x, 0.0);
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(deg.begin(), deg.end(), 0);
    for (std::size_t k = 0; k < edges.size(); ++k) {
      const auto [i, j] = edges[k];
      sum[i] += w[k];
      sum[j] += w[k];
      if (w[k] > 0) ++deg[i], ++deg[j];
    }
    bool feasible = true;
    for (int i = 0; i < n; ++i) feasible &= sum[i] <= kCap;
    if (feasible) return;
    std::vector<double> cut(static_cast<std::size_t>(n), 0.0);
    for (int i = 0; i < n; ++i)
      if (sum[i] > kCap && deg[i] > 0) cut[i] = (sum[i] - kCap) / deg[i];
    for (std::size_t k = 0; k < edges.size(); ++k) {
      const auto [i, j] = edges[k];
      if (w[k] > 0) w[k] -= std::max(cut[i], cut[j]);
    }
  }
  for (double& x : w) x = std::max(x, 0.0);
  std::fill(sum.begin(), sum.end(), 0.0);
  for (std::size_t k = 0; k < edges.size(); ++k) {
    sum[edges[k].first] += w[k];
    sum[edges[k].second] += w[k];
  }
  for (std::size_t k = 0; k < edges.size(); ++k)
    w[k] *= kCap / std::max({kCap, sum[edges[k].first], sum[edges[k].second]});
}

}  // namespace

Result<OptimizeResult> optimize_weights(const Graph& graph, const OptimizeOptions& options) {
  if (graph.is_directed())
    return invalid_argument("optimized (FDLA) weights need an undirected graph");
  if (!graph.is_connected()) return invalid_argument("optimized weights need a connected graph");
  const int n = graph.num_nodes();
  const auto edges = graph.edges();
  std::vector<double> w(edges.size());
  for (std::size_t k = 0; k < edges.size(); ++k)
    w[k] = metropolis_hastings_weight(graph.degree(edges[k].first), graph.degree(edges[k].second));

  OptimizeResult best;
  const bool dense = n <= options.dense_max_nodes;
  Stopwatch watch;
  double norm_mh = 0.0;
  for (double x : w) norm_mh += x * x;
  norm_mh = std::sqrt(norm_mh);
  const double step0 = options.initial_step > 0 ? options.initial_step : 0.05 * norm_mh;

  Extremes prev;
  bool have_prev = false;
  std::vector<double> best_w = w;
  double best_rho = INFINITY;
  int it = 0;
  for (; it <= options.max_iterations; ++it) {
    const SparseMatrix wm = weights_from_edge_values(graph, w);
    GOSSIP_ASSIGN_OR_RETURN(Extremes e, extremes(wm, dense, have_prev ? &prev : nullptr));
    const double rho = std::max(e.lambda2, -e.lambda_n);
    if (it == 0) best.rho_metropolis_hastings = rho;
    if (rho < best_rho) {
      best_rho = rho;
      best_w = w;
      best.best_iteration = it;
    }
    if (it == options.max_iterations || watch.elapsed_seconds() > options.time_limit_s || n < 3)
      break;
    // Subgradient of rho w.r.t. w_e: d lambda_2 / d w_e = -(u_i - u_j)^2 and
    // d(-lambda_n) / d w_e = +(v_i - v_j)^2 (W = I - sum_e w_e (e_i - e_j)(e_i - e_j)^T).
    const bool top = e.lambda2 >= -e.lambda_n;
    const Eigen::VectorXd& x = top ? e.u : e.v;
    std::vector<double> g(edges.size());
    double gnorm = 0.0;
    for (std::size_t k = 0; k < edges.size(); ++k) {
      const double d = x[edges[k].first] - x[edges[k].second];
      g[k] = (top ? -1.0 : 1.0) * d * d / x.squaredNorm();
      gnorm += g[k] * g[k];
    }
    gnorm = std::sqrt(gnorm);
    if (gnorm == 0.0) break;
    const double step = step0 / std::sqrt(1.0 + it);
    for (std::size_t k = 0; k < edges.size(); ++k) w[k] -= step * g[k] / gnorm;
    project(edges, n, w);
    prev = std::move(e);
    have_prev = !dense;
  }
  best.iterations = it;
  best.rho = best_rho;
  best.edge_weights = best_w;
  best.weights = weights_from_edge_values(graph, best_w);
  return best;
}

}  // namespace gossip::topology

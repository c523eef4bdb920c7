// Weight schemes. Every scheme except best-constant is local (a node needs its own degree, its
// neighbours' degrees, or the maximum degree), which is what lets a daemon recompute its row after
// a neighbour disappears.
#include "topology/weights.h"

#include <algorithm>

#include "common/check.h"
#include "common/enum_names.h"
#include "topology/spectral.h"

namespace gossip::topology {
namespace {

// Names, then aliases (common/enum_names.h).
constexpr EnumName<WeightScheme> kSchemeNames[] = {
    {WeightScheme::kDefault, "default"},
    {WeightScheme::kMetropolisHastings, "metropolis_hastings"},
    {WeightScheme::kMaxDegree, "max_degree"},
    {WeightScheme::kUniform, "uniform"},
    {WeightScheme::kLazyMetropolisHastings, "lazy"},
    {WeightScheme::kLazyUniform, "lazy_uniform"},
    {WeightScheme::kBestConstant, "best_constant"},
    {WeightScheme::kExplicit, "explicit"},
    {WeightScheme::kOptimized, "optimized"},
    {WeightScheme::kMetropolisHastings, "mh"},
    {WeightScheme::kMetropolisHastings, "metropolis"},
    {WeightScheme::kOptimized, "fdla"},
    {WeightScheme::kLazyMetropolisHastings, "lazy_metropolis_hastings"},
};

using Triplet = Eigen::Triplet<double>;

// Builds W from off-diagonal weights per arc (weight of arc j -> i goes to W(i, j)) and puts
// 1 - (row sum) on the diagonal. Writes the compressed column-major arrays directly (column j holds
// the out-neighbours of j and j itself, ascending): no triplets, no sort, no per-entry allocation.
SparseMatrix from_row_weights(const Graph& g, const auto& weight_of /* (i, j) -> W_ij */) {
  const int n = g.num_nodes();
  std::vector<double> diag(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    double off = 0.0;
    for (int j : g.in_neighbors(i)) off += weight_of(i, j);  // summed in ascending j, as always
    diag[i] = 1.0 - off;
  }
  std::int64_t nnz = n;
  for (int j = 0; j < n; ++j) nnz += g.out_degree(j);
  SparseMatrix w(n, n);
  w.resizeNonZeros(static_cast<Eigen::Index>(nnz));
  int* outer = w.outerIndexPtr();
  int* inner = w.innerIndexPtr();
  double* value = w.valuePtr();
  std::int64_t k = 0;
  for (int j = 0; j < n; ++j) {
    outer[j] = static_cast<int>(k);
    bool diag_done = false;
    for (int i : g.out_neighbors(j)) {
      if (!diag_done && i > j) {
        inner[k] = j;
        value[k++] = diag[j];
        diag_done = true;
      }
      inner[k] = i;
      value[k++] = weight_of(i, j);
    }
    if (!diag_done) {
      inner[k] = j;
      value[k++] = diag[j];
    }
  }
  outer[n] = static_cast<int>(k);
  return w;
}

// out <- w without a copy (Eigen 3.4's SparseMatrix has no move constructor or move assignment).
void take(SparseMatrix& out, SparseMatrix w) { out.swap(w); }

}  // namespace

Result<WeightScheme> parse_weight_scheme(std::string_view name) {
  return parse_enum(kSchemeNames, name, "weight scheme");
}

std::string_view weight_scheme_name(WeightScheme scheme) { return enum_name(kSchemeNames, scheme); }

double metropolis_hastings_weight(int degree_i, int degree_j) {
  return 1.0 / (1.0 + std::max(degree_i, degree_j));
}

LocalWeights local_metropolis_hastings(int self_degree, std::span<const int> neighbor_degrees) {
  LocalWeights out;
  out.neighbors.reserve(neighbor_degrees.size());
  double off = 0.0;
  for (int d : neighbor_degrees) {
    const double w = metropolis_hastings_weight(self_degree, d);
    out.neighbors.push_back(w);
    off += w;
  }
  out.self = 1.0 - off;
  return out;
}

SparseMatrix lazy(const SparseMatrix& w) {
  SparseMatrix eye(w.rows(), w.cols());
  eye.setIdentity();
  SparseMatrix out = 0.5 * (w + eye);
  out.makeCompressed();
  return out;
}

SparseMatrix weights_from_edge_values(const Graph& graph, std::span<const double> edge_weights) {
  const auto edges = graph.edges();
  GOSSIP_CHECK_EQ(edges.size(), edge_weights.size());
  GOSSIP_CHECK(!graph.is_directed());
  const int n = graph.num_nodes();
  std::vector<double> diag(static_cast<std::size_t>(n), 1.0);
  std::vector<Triplet> t;
  t.reserve(edges.size() * 2 + n);
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const auto [i, j] = edges[e];
    t.emplace_back(i, j, edge_weights[e]);
    t.emplace_back(j, i, edge_weights[e]);
    diag[i] -= edge_weights[e];
    diag[j] -= edge_weights[e];
  }
  for (int i = 0; i < n; ++i) t.emplace_back(i, i, diag[i]);
  SparseMatrix w(n, n);
  w.setFromTriplets(t.begin(), t.end());
  w.makeCompressed();
  return w;
}

Status compute_weights_into(const Graph& g, WeightScheme scheme, SparseMatrix& out) {
  if (scheme == WeightScheme::kDefault)
    scheme = g.is_directed() ? WeightScheme::kUniform : WeightScheme::kMetropolisHastings;
  const bool symmetric_only =
      scheme != WeightScheme::kUniform && scheme != WeightScheme::kLazyUniform;
  if (g.is_directed() && symmetric_only)
    return invalid_argument("weight scheme '" + std::string(weight_scheme_name(scheme)) +
                            "' needs an undirected graph; directed graphs take 'uniform' "
                            "(in-degree-regular) or 'explicit' weights");
  switch (scheme) {
    case WeightScheme::kMetropolisHastings:
    case WeightScheme::kLazyMetropolisHastings: {
      take(out, from_row_weights(g, [&](int i, int j) {
             return metropolis_hastings_weight(g.degree(i), g.degree(j));
           }));
      if (scheme == WeightScheme::kLazyMetropolisHastings) take(out, lazy(out));
      return Status::ok();
    }
    case WeightScheme::kMaxDegree: {
      const double w = 1.0 / (1.0 + g.max_degree());
      take(out, from_row_weights(g, [w](int, int) { return w; }));
      return Status::ok();
    }
    case WeightScheme::kUniform:
    case WeightScheme::kLazyUniform: {
      if (!g.is_directed() && g.min_degree() != g.max_degree())
        return invalid_argument("weight scheme 'uniform' needs a regular graph (degrees range " +
                                std::to_string(g.min_degree()) + ".." +
                                std::to_string(g.max_degree()) +
                                "); use metropolis_hastings or max_degree");
      take(out, from_row_weights(g, [&](int i, int) { return 1.0 / (1.0 + g.in_degree(i)); }));
      if (scheme == WeightScheme::kLazyUniform) take(out, lazy(out));
      return Status::ok();
    }
    case WeightScheme::kBestConstant: {
      // L = D - A; W = I - alpha L with alpha = 2 / (lambda_1(L) + lambda_{n-1}(L)).
      const int n = g.num_nodes();
      if (n == 1) {
        take(out, from_row_weights(g, [](int, int) { return 0.0; }));
        return Status::ok();
      }
      std::vector<Triplet> t;
      for (int i = 0; i < n; ++i) {
        t.emplace_back(i, i, g.degree(i));
        for (int j : g.out_neighbors(i)) t.emplace_back(i, j, -1.0);
      }
      SparseMatrix lap(n, n);
      lap.setFromTriplets(t.begin(), t.end());
      GOSSIP_ASSIGN_OR_RETURN(auto ext, laplacian_extremes(lap));
      const auto [small, large] = ext;
      if (!(small > 1e-12)) return invalid_argument("best_constant weights need a connected graph");
      const double alpha = 2.0 / (small + large);
      take(out, from_row_weights(g, [alpha](int, int) { return alpha; }));
      return Status::ok();
    }
    case WeightScheme::kExplicit:
      return invalid_argument("explicit weights come from the topology file, not a scheme");
    case WeightScheme::kOptimized:
      return invalid_argument("optimized weights come from optimize_weights() (optimize.h)");
    case WeightScheme::kDefault:
      break;
  }
  return invalid_argument("unknown weight scheme");
}

Result<SparseMatrix> compute_weights(const Graph& g, WeightScheme scheme) {
  SparseMatrix w;
  GOSSIP_RETURN_IF_ERROR(compute_weights_into(g, scheme, w));
  return w;
}

}  // namespace gossip::topology

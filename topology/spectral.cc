// Spectral analysis: the entry points (analyze, analyze_matrix, laplacian_extremes), the method
// names, the choice between the exact, dense and Lanczos methods (spectral_exact.cc,
// spectral_dense.cc, spectral_lanczos.cc) and the symmetry test and Rayleigh refinements they
// share. The three methods share one principle: never compute a small gap as the difference of two
// numbers near 1. The exact method sums w_g 2 sin^2(theta/2); the dense and Lanczos methods
// recompute 1 - lambda_2 and 1 + lambda_n from the eigenvector as sums over edges (Rayleigh
// quotients of I - W and I + W, with W's diagonal taken as 1 - its off-diagonal row sum).
#include "topology/spectral.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/clock.h"
#include "common/enum_names.h"
#include "common/units.h"
#include "topology/spectral_internal.h"

namespace gossip::topology {
namespace spectral_internal {

bool is_symmetric(const SparseMatrix& w) {
  const SparseMatrix t = w.transpose();
  if (t.nonZeros() != w.nonZeros()) return false;
  for (int j = 0; j < w.outerSize(); ++j) {
    SparseMatrix::InnerIterator a(w, j), b(t, j);
    for (; a && b; ++a, ++b)
      if (a.row() != b.row() || a.value() != b.value()) return false;
    if (a || b) return false;
  }
  return true;
}

// ---------------------------------------------------------------- Rayleigh refinements

// v^T (I - W) v / v^T v = 1/2 sum_{i != j} W_ij (v_i - v_j)^2 / |v|^2 (W symmetric, exact row
// sums).
double one_minus_rayleigh(const SparseMatrix& w, const Eigen::VectorXd& v) {
  double s = 0.0;
  for (int j = 0; j < w.outerSize(); ++j)
    for (SparseMatrix::InnerIterator it(w, j); it; ++it)
      if (it.row() != j) {
        const double d = v[it.row()] - v[j];
        s += it.value() * d * d;
      }
  return 0.5 * s / v.squaredNorm();
}

// v^T (I + W) v / v^T v = (sum_i 2 W_ii v_i^2 + 1/2 sum_{i != j} W_ij (v_i + v_j)^2) / |v|^2.
double one_plus_rayleigh(const SparseMatrix& w, const Eigen::VectorXd& v) {
  double s = 0.0;
  for (int j = 0; j < w.outerSize(); ++j)
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      if (it.row() == j) {
        s += 2.0 * it.value() * v[j] * v[j];
      } else {
        const double d = v[it.row()] + v[j];
        s += 0.5 * it.value() * d * d;
      }
    }
  return s / v.squaredNorm();
}

Eigen::VectorXd deflate(Eigen::VectorXd v) {
  v.array() -= v.mean();
  return v;
}

void fill_symmetric(SpectralReport& rep, double omr, double opr) {
  rep.one_minus_lambda2 = omr;
  rep.one_plus_lambda_n = opr;
  rep.lambda2 = 1.0 - omr;
  rep.lambda_n = opr - 1.0;
  // rho = max(|lambda_2|, |lambda_n|); with lambda_2 < 0 its modulus gap is 1 + lambda_2.
  const double g2 = rep.lambda2 >= 0 ? omr : 1.0 + rep.lambda2;
  const double gn = rep.lambda_n <= 0 ? opr : 1.0 - rep.lambda_n;
  rep.gap = std::min(g2, gn);
  rep.rho = 1.0 - rep.gap;
  rep.abs_lambda2 = std::max(std::abs(rep.lambda2), std::abs(rep.lambda_n));
}

}  // namespace spectral_internal

namespace {

using spectral_internal::dense_method;
using spectral_internal::exact_method;
using spectral_internal::lanczos_method;

void finish_rates(SpectralReport& r) {
  if (r.period <= 1) {
    r.rho_per_iteration = r.rho;
    r.gap_per_iteration = r.gap;
  } else if (r.rho <= 0.0) {
    r.rho_per_iteration = 0.0;
    r.gap_per_iteration = 1.0;
  } else {
    // log(rho) = log1p(-gap) keeps tiny gaps.
    const double log_rho = std::log1p(-r.gap) / r.period;
    r.rho_per_iteration = std::exp(log_rho);
    r.gap_per_iteration = -std::expm1(log_rho);
  }
}

// The Lanczos method within o.time_limit_s: refused at once when its estimate is above the limit
// (its time grows like n times the hop diameter: a 3000 x 3000 grid needs hours, not the seconds
// its generation takes), stopped at the limit when the estimate was short of it.
constexpr double kNoteSeconds = 5;  // SpectralOptions::note is told estimates from here on

Result<SpectralReport> timed_lanczos(const std::vector<const SparseMatrix*>& ws,
                                     const SpectralOptions& o) {
  if (o.time_limit_s > 0 || o.note) {
    const LanczosEstimate e = lanczos_estimate(ws, o);
    const std::string what = "the Lanczos method on " + std::to_string(ws.front()->rows()) +
                             " nodes needs " + e.to_string();
    if (o.time_limit_s > 0 && e.seconds > o.time_limit_s) {
      return deadline_exceeded(what + ", more than the time limit of " +
                               format_duration_s(o.time_limit_s) +
                               "; raise the limit to run it, or analyze a smaller instance of the "
                               "same family (its gap shrinks like 1/diameter^2)");
    }
    if (o.note && e.seconds >= kNoteSeconds) o.note(what);
  }
  return lanczos_method(ws, o);
}

Result<SpectralReport> analyze_list(const std::vector<const SparseMatrix*>& ws,
                                    const SpectralOptions& o) {
  const SparseMatrix& w0 = *ws.front();
  GOSSIP_CHECK(w0.rows() == w0.cols() && w0.rows() > 0) << "W must be square and nonempty";
  const int n = static_cast<int>(w0.rows());
  Stopwatch watch;
  Result<SpectralReport> rep = internal_error("no method ran");
  switch (o.method) {
    case SpectralMethod::kExact: {
      if (o.symmetry.empty()) {
        rep = exact_method(ws, {n});
      } else {
        rep = exact_method(ws, o.symmetry);
      }
      if (!rep.is_ok())
        return invalid_argument("exact method does not apply: " + rep.status().message());
      break;
    }
    case SpectralMethod::kDense:
      if (n > 20000) return invalid_argument("dense method refused for n > 20000");
      rep = dense_method(ws);
      break;
    case SpectralMethod::kLanczos:
      rep = timed_lanczos(ws, o);
      break;
    case SpectralMethod::kAuto: {
      if (!o.symmetry.empty()) rep = exact_method(ws, o.symmetry);
      if (!rep.is_ok()) rep = exact_method(ws, {n});  // any circulant W
      if (!rep.is_ok()) {
        rep = n <= o.dense_max_nodes || n < 4 ? dense_method(ws) : timed_lanczos(ws, o);
      }
      break;
    }
  }
  if (!rep.is_ok()) return rep;
  rep->seconds = watch.elapsed_seconds();
  finish_rates(*rep);
  return rep;
}

}  // namespace

namespace {
constexpr EnumName<SpectralMethod> kMethodNames[] = {
    {SpectralMethod::kAuto, "auto"},      {SpectralMethod::kExact, "exact"},
    {SpectralMethod::kDense, "dense"},    {SpectralMethod::kLanczos, "lanczos"},
    {SpectralMethod::kLanczos, "sparse"},  // alias
};
}  // namespace

Result<SpectralMethod> parse_spectral_method(std::string_view name) {
  return parse_enum(kMethodNames, name, "spectral method");
}

std::string_view spectral_method_name(SpectralMethod method) {
  return enum_name(kMethodNames, method);
}

Result<SpectralReport> analyze_matrix(const SparseMatrix& w, const SpectralOptions& options) {
  return analyze_list({&w}, options);
}

Result<SpectralReport> analyze(const Topology& topology, SpectralOptions options) {
  if (options.symmetry.empty()) options.symmetry = topology.symmetry_group();
  std::vector<const SparseMatrix*> ws;
  for (int t = 0; t < topology.period(); ++t) ws.push_back(&topology.mixing_matrix(t));
  return analyze_list(ws, options);
}

Result<std::pair<double, double>> laplacian_extremes(const SparseMatrix& laplacian) {
  // W0 = I - L / (d + 1) with d >= the largest diagonal entry is a max-degree gossip matrix, so
  // lambda_{n-1}(L) = (d + 1)(1 - lambda_2(W0)) and lambda_1(L) = (d + 1)(1 - lambda_n(W0)).
  const int n = static_cast<int>(laplacian.rows());
  double d = 0.0;
  for (int i = 0; i < n; ++i) d = std::max(d, laplacian.coeff(i, i));
  SparseMatrix eye(n, n);
  eye.setIdentity();
  const SparseMatrix w0 = eye - laplacian / (d + 1.0);
  GOSSIP_ASSIGN_OR_RETURN(auto rep, analyze_matrix(w0));
  if (!rep.symmetric) return invalid_argument("laplacian_extremes needs a symmetric Laplacian");
  return std::make_pair((d + 1.0) * rep.one_minus_lambda2,
                        (d + 1.0) * (2.0 - rep.one_plus_lambda_n));
}

}  // namespace gossip::topology

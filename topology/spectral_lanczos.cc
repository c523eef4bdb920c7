// Spectral analysis, Lanczos method for large n: symmetric W by our own plain Lanczos recurrence on
// P W P (symmetric_extremes: both ends of the spectrum from one Krylov space, three vectors of
// memory, a second pass for the Ritz vectors); non-symmetric W and time-varying schedules by
// Spectra's restarted Lanczos on M^T M. The gap is recomputed from the Ritz vector as a Rayleigh
// quotient, which keeps relative accuracy for small gaps.
#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>

#include "common/check.h"
#include "common/clock.h"
#include "common/random.h"
#include "common/units.h"
#include "topology/spectral.h"
#include "topology/spectral_internal.h"

namespace gossip::topology {
namespace {

using namespace spectral_internal;  // helpers shared by the spectral methods

// ---------------------------------------------------------------- Lanczos (own, symmetric W)

// Plain Lanczos on A = P W P, P = I - J (the all-ones direction projected out of every product),
// for symmetric W stored as CSC (= CSR of W^T = W, so each product is a row-wise gather over the
// raw arrays: no Eigen expression overhead, no scattered writes). Both ends of the spectrum of A on
// 1-perp (lambda_2 and lambda_n of W) come out of one Krylov space. No reorthogonalisation and no
// restarts: only three vectors are kept; the tridiagonal T_m is watched (Sturm bisection for its
// extreme eigenvalues, inverse iteration for their eigenvectors s) and an end is converged when
// Paige's bound beta_{m+1} |s_m| on the Ritz residual is below tolerance * ||A||. Loss of
// orthogonality after an end has converged only adds copies of converged Ritz values (Paige 1976),
// which leaves the extreme values intact; each end's Ritz vector is taken from T at the step where
// that end converged, before copies appear. A second pass regenerates the Lanczos vectors bit for
// bit (same code, same order) and accumulates the two Ritz vectors.
class LanczosRun {
 public:
  LanczosRun(const SparseMatrix& w, const Eigen::VectorXd& start)
      : n_(w.rows()),
        outer_(w.outerIndexPtr()),
        inner_(w.innerIndexPtr()),
        val_(w.valuePtr()),
        v_(start),
        prev_(Eigen::VectorXd::Zero(n_)),
        u_(n_) {
    v_.array() -= v_.mean();
    v_ /= v_.norm();
  }
  const Eigen::VectorXd& v() const { return v_; }
  // One step: returns (alpha_j, beta_{j+1}) and advances v to v_{j+1}.
  std::pair<double, double> step() {
    const Eigen::Index n = n_;
    const double* v = v_.data();
    const double* p = prev_.data();
    double* u = u_.data();
    const double b = beta_;
    double sum_u = 0.0, dot_vu = 0.0, sum_v = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) {
      double acc = -b * p[i];
      for (int k = outer_[i]; k < outer_[i + 1]; ++k) acc += val_[k] * v[inner_[k]];
      u[i] = acc;
      sum_u += acc;
      dot_vu += v[i] * acc;
      sum_v += v[i];
    }
    // alpha = v . (P u) = v . u - mean(u) sum(v); then u <- P (u - alpha v), the projection taken
    // last so that no component along 1 survives (projecting before subtracting alpha v would
    // let the rounding-level mean of v grow by alpha / beta per step).
    const double mean_u = sum_u / static_cast<double>(n);
    const double alpha = dot_vu - mean_u * sum_v;
    const double mean = mean_u - alpha * sum_v / static_cast<double>(n);
    double norm2 = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double x = u[i] - mean - alpha * v[i];
      u[i] = x;
      norm2 += x * x;
    }
    const double beta = std::sqrt(norm2);
    prev_.swap(v_);  // prev <- v_j
    v_.swap(u_);     // v <- u (scaled below)
    if (beta > 0.0) v_ /= beta;
    beta_ = beta;
    return {alpha, beta};
  }

 private:
  Eigen::Index n_;
  const int* outer_;
  const int* inner_;
  const double* val_;
  Eigen::VectorXd v_, prev_, u_;
  double beta_ = 0.0;
};

// Number of eigenvalues of the symmetric tridiagonal (a, b) (b[j] couples j and j + 1) below x.
int sturm_count(const std::vector<double>& a, const std::vector<double>& b, int m, double x) {
  int count = 0;
  double q = 1.0;
  for (int j = 0; j < m; ++j) {
    const double bb = j > 0 ? b[j - 1] * b[j - 1] : 0.0;
    q = a[j] - x - (j > 0 ? bb / q : 0.0);
    if (q == 0.0) q = -kEps * (std::abs(a[j]) + std::abs(x) + 1e-300);
    if (q < 0) ++count;
  }
  return count;
}

// The k-th smallest eigenvalue (0-based) of the leading m x m block, by bisection.
double tridiagonal_eigenvalue(const std::vector<double>& a, const std::vector<double>& b, int m,
                              int k) {
  double lo = INFINITY, hi = -INFINITY;
  for (int j = 0; j < m; ++j) {
    const double r = (j > 0 ? std::abs(b[j - 1]) : 0.0) + (j + 1 < m ? std::abs(b[j]) : 0.0);
    lo = std::min(lo, a[j] - r);
    hi = std::max(hi, a[j] + r);
  }
  for (int it = 0; it < 200 && hi - lo > 2 * kEps * std::max(std::abs(lo), std::abs(hi)) + 1e-300;
       ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (sturm_count(a, b, m, mid) > k)
      hi = mid;
    else
      lo = mid;
  }
  return 0.5 * (lo + hi);
}

// Unit eigenvector of the leading m x m block for the eigenvalue theta: two steps of inverse
// iteration, Gaussian elimination with partial pivoting on the tridiagonal (as LAPACK dgttrf).
std::vector<double> tridiagonal_eigenvector(const std::vector<double>& a,
                                            const std::vector<double>& b, int m, double theta) {
  std::vector<double> x(static_cast<std::size_t>(m), 1.0);
  if (m == 1) return x;
  double scale = 0.0;
  for (int j = 0; j < m; ++j)
    scale = std::max(scale, std::abs(a[j]) + (j + 1 < m ? std::abs(b[j]) : 0));
  const double tiny = kEps * std::max(scale, 1e-300);
  // Factor T - theta I = L U; U has diagonal d, superdiagonals e1, e2; L multipliers l, swaps piv.
  std::vector<double> d(m), e1(m, 0.0), e2(m, 0.0), l(m, 0.0);
  std::vector<char> piv(m, 0);
  for (int j = 0; j < m; ++j) d[j] = a[j] - theta;
  for (int j = 0; j + 1 < m; ++j) e1[j] = b[j];
  std::vector<double> sub(b.begin(), b.begin() + (m - 1));  // subdiagonal
  for (int j = 0; j + 1 < m; ++j) {
    if (std::abs(d[j]) >= std::abs(sub[j])) {
      if (d[j] == 0.0) d[j] = tiny;
      l[j] = sub[j] / d[j];
      d[j + 1] -= l[j] * e1[j];
    } else {
      piv[j] = 1;
      l[j] = d[j] / sub[j];
      d[j] = sub[j];
      const double t = e1[j];
      e1[j] = d[j + 1];
      d[j + 1] = t - l[j] * d[j + 1];
      if (j + 2 < m) {
        e2[j] = e1[j + 1];
        e1[j + 1] = -l[j] * e2[j];
      }
    }
  }
  if (d[m - 1] == 0.0) d[m - 1] = tiny;
  for (int iter = 0; iter < 3; ++iter) {
    for (int j = 0; j + 1 < m; ++j) {  // forward: apply L^-1 with the swaps
      if (piv[j]) std::swap(x[j], x[j + 1]);
      x[j + 1] -= l[j] * x[j];
    }
    for (int j = m - 1; j >= 0; --j) {  // back: U^-1
      double s = x[j];
      if (j + 1 < m) s -= e1[j] * x[j + 1];
      if (j + 2 < m) s -= e2[j] * x[j + 2];
      x[j] = s / d[j];
    }
    double norm = 0.0;
    for (double v : x) norm = std::max(norm, std::abs(v));
    for (double& v : x) v /= norm;
  }
  double norm2 = 0.0;
  for (double v : x) norm2 += v * v;
  const double inv = 1.0 / std::sqrt(norm2);
  for (double& v : x) v *= inv;
  return x;
}

}  // namespace

Result<SymmetricExtremes> symmetric_extremes(const SparseMatrix& w, double tolerance, int max_steps,
                                             const Eigen::VectorXd* start, double time_limit_s) {
  Stopwatch watch;
  const Eigen::Index n = w.rows();
  if (n < 3) return invalid_argument("Lanczos needs at least 3 nodes; use the dense method");
  GOSSIP_CHECK(w.isCompressed()) << "symmetric_extremes needs a compressed matrix";
  Eigen::VectorXd x0(n);
  if (start != nullptr && start->size() == n) {
    x0 = *start;
    x0.array() -= x0.mean();
  }
  if (start == nullptr || start->size() != n || !(x0.norm() > 0.0) || !x0.allFinite()) {
    Rng rng(0x5eed);
    for (Eigen::Index i = 0; i < n; ++i) x0[i] = rng.uniform(-1.0, 1.0);
  }
  // Pass 1: the tridiagonal T (alpha on the diagonal, beta off it). The Lanczos vectors are not
  // kept: regenerating them costs one more product each, storing them (fresh memory, page faults)
  // measured slower even at n = 10^4.
  std::vector<double> alpha, beta;
  LanczosRun run(w, x0);
  struct End {
    bool done = false;
    int m = 0;
    double theta = 0.0, bound = INFINITY;
    std::vector<double> s;
  } top, bottom;
  const int limit =
      static_cast<int>(std::min<Eigen::Index>(max_steps, std::max<Eigen::Index>(n, 8) * 4));
  int next_check = std::min(8, limit);
  int m = 0;
  bool breakdown = false;
  while (m < limit && !(top.done && bottom.done)) {
    const auto [a, b] = run.step();
    alpha.push_back(a);
    beta.push_back(b);
    ++m;
    // Invariant subspace (Krylov space exhausted): T's eigenvalues are exact eigenvalues of A.
    breakdown = !(b > 1e-13 * std::max({std::abs(a), m > 1 ? beta[m - 2] : 0.0, 1e-300}));
    if (m < next_check && !breakdown && m < limit) continue;
    next_check = m + std::max(8, m / 16);
    if (time_limit_s > 0 && watch.elapsed_seconds() > time_limit_s) {
      return deadline_exceeded("Lanczos stopped at the time limit of " +
                               std::to_string(time_limit_s) + " s after " + std::to_string(m) +
                               " steps without converging");
    }
    double scale = 0.0;
    for (End* e : {&top, &bottom}) {
      if (e->done) continue;
      e->theta = tridiagonal_eigenvalue(alpha, beta, m, e == &top ? m - 1 : 0);
      e->s = tridiagonal_eigenvector(alpha, beta, m, e->theta);
      e->bound = b * std::abs(e->s[static_cast<std::size_t>(m - 1)]);
    }
    scale = std::max({std::abs(top.theta), std::abs(bottom.theta), 1e-300});
    for (End* e : {&top, &bottom})
      if (!e->done && (e->bound <= tolerance * scale || breakdown)) {
        e->done = true;
        e->m = m;
      }
    if (breakdown) break;
  }
  if (!(top.done && bottom.done))
    return internal_error(
        "Lanczos did not converge in " + std::to_string(m) + " steps (Ritz values " +
        std::to_string(top.theta) + ", " + std::to_string(bottom.theta) + ", residual bounds " +
        std::to_string(top.bound) + ", " + std::to_string(bottom.bound) + ", tolerance " +
        std::to_string(tolerance) + "); try --method dense for small n");
  // Pass 2: regenerate v_1 .. v_M and accumulate the Ritz vectors V s.
  SymmetricExtremes out;
  out.lambda2 = top.theta;
  out.lambda_n = bottom.theta;
  out.steps = m;
  out.u = Eigen::VectorXd::Zero(n);
  out.v = Eigen::VectorXd::Zero(n);
  const int last = std::max(top.m, bottom.m);
  LanczosRun again(w, x0);
  for (int j = 0; j < last; ++j) {
    if (j < top.m) out.u += top.s[static_cast<std::size_t>(j)] * again.v();
    if (j < bottom.m) out.v += bottom.s[static_cast<std::size_t>(j)] * again.v();
    if (j + 1 < last) again.step();
  }
  out.applications = m + last - 1;
  for (Eigen::VectorXd* y : {&out.u, &out.v}) {
    y->array() -= y->mean();
    *y /= y->norm();
  }
  // True residuals ||P W P y - theta y||.
  Eigen::VectorXd wy(n);
  double res = 0.0;
  for (int e = 0; e < 2; ++e) {
    const Eigen::VectorXd& y = e == 0 ? out.u : out.v;
    const double theta = e == 0 ? out.lambda2 : out.lambda_n;
    wy.noalias() = w.transpose() * y;  // W symmetric: a gather product
    wy.array() -= wy.mean();
    res = std::max(res, (wy - theta * y).norm());
  }
  out.residual = res;
  return out;
}

namespace {
// ---------------------------------------------------------------- Lanczos (Spectra)

// x -> M^T M x with M = (W(p-1) ... W(0)) - J for doubly-stochastic W(t).
class GramOp {
 public:
  using Scalar = double;
  explicit GramOp(const std::vector<const SparseMatrix*>& ws) : ws_(ws), a_(rows()), b_(rows()) {}
  Eigen::Index rows() const { return ws_.front()->rows(); }
  Eigen::Index cols() const { return rows(); }
  void perform_op(const double* x_in, double* y_out) const {
    Eigen::Map<const Eigen::VectorXd> x(x_in, rows());
    Eigen::Map<Eigen::VectorXd> y(y_out, rows());
    a_ = x.array() - x.mean();
    for (const SparseMatrix* w : ws_) {
      b_.noalias() = (*w) * a_;
      a_.swap(b_);
    }
    for (auto it = ws_.rbegin(); it != ws_.rend(); ++it) {
      b_.noalias() = (*it)->transpose() * a_;
      a_.swap(b_);
    }
    y = a_.array() - a_.mean();
  }

 private:
  const std::vector<const SparseMatrix*>& ws_;
  mutable Eigen::VectorXd a_, b_;
};

template <typename Op>
Result<std::pair<Eigen::VectorXd, Eigen::MatrixXd>> run_lanczos(Op& op, Spectra::SortRule rule,
                                                                int nev, const SpectralOptions& o,
                                                                SpectralReport& rep) {
  const int n = static_cast<int>(op.rows());
  const int ncv = std::min(n, std::max(2 * nev + 1, 32));
  Spectra::SymEigsSolver<Op> eigs(op, nev, ncv);
  // A centred start vector keeps the whole Krylov space in 1-perp (the operators centre their
  // output), so the all-ones direction never shows up as a Ritz value.
  Rng rng(0x5eed);
  Eigen::VectorXd start(n);
  for (int i = 0; i < n; ++i) start[i] = rng.uniform(-1.0, 1.0);
  start.array() -= start.mean();
  eigs.init(start.data());
  eigs.compute(rule, o.max_iterations, o.tolerance, Spectra::SortRule::LargestAlge);
  rep.iterations += static_cast<int>(eigs.num_iterations());
  rep.detail = "Lanczos (Spectra SymEigsSolver, ncv=" + std::to_string(ncv) + ", " +
               std::to_string(rep.iterations) + " restarts, " +
               std::to_string(eigs.num_operations()) + " operator applications)";
  if (eigs.info() != Spectra::CompInfo::Successful)
    return internal_error("Lanczos did not converge in " + std::to_string(o.max_iterations) +
                          " restarts (tolerance " + std::to_string(o.tolerance) +
                          "); try --method dense for small n");
  return std::make_pair(Eigen::VectorXd(eigs.eigenvalues()), Eigen::MatrixXd(eigs.eigenvectors()));
}

}  // namespace

Result<SpectralReport> spectral_internal::lanczos_method(const std::vector<const SparseMatrix*>& ws,
                                                         const SpectralOptions& o) {
  const int n = static_cast<int>(ws.front()->rows());
  if (n < 4) return invalid_argument("Lanczos needs at least 4 nodes; use the dense method");
  SpectralReport rep;
  rep.method = SpectralMethod::kLanczos;
  rep.num_nodes = n;
  rep.period = static_cast<int>(ws.size());
  rep.symmetric = ws.size() == 1 && is_symmetric(*ws.front());
  if (rep.symmetric) {
    const SparseMatrix& w = *ws.front();
    SparseMatrix compressed;
    const SparseMatrix* wc = &w;
    if (!w.isCompressed()) {
      compressed = w;
      compressed.makeCompressed();
      wc = &compressed;
    }
    GOSSIP_ASSIGN_OR_RETURN(
        const SymmetricExtremes ex,
        symmetric_extremes(*wc, o.tolerance, o.max_iterations, nullptr, o.time_limit_s));
    if (!(ex.residual < 1e-6))
      return internal_error("Lanczos converged to a poor eigenpair (residual " +
                            std::to_string(ex.residual) + "); try --method dense");
    rep.residual = ex.residual;
    rep.iterations = ex.steps;
    rep.detail = "Lanczos on P W P, P = I - J (both ends from one Krylov space, no restarts; " +
                 std::to_string(ex.steps) + " steps, " + std::to_string(ex.applications) +
                 " products with W)";
    fill_symmetric(rep, one_minus_rayleigh(w, ex.u), one_plus_rayleigh(w, ex.v));
    return rep;
  }
  GramOp op(ws);
  GOSSIP_ASSIGN_OR_RETURN(auto res, run_lanczos(op, Spectra::SortRule::LargestAlge, 1, o, rep));
  const auto& [vals, vecs] = res;
  const Eigen::VectorXd v = vecs.col(0);
  Eigen::VectorXd y(n);
  op.perform_op(v.data(), y.data());
  rep.residual = (y - vals[0] * v).norm() / v.norm();
  const double sigma2 = std::max(0.0, vals[0]);
  rep.rho = std::sqrt(sigma2);
  rep.gap = (1.0 - sigma2) / (1.0 + rep.rho);
  rep.abs_lambda2 = kNaN;  // not computed by this method
  rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
  rep.detail += ws.size() > 1 ? " on M^T M, M = period product - J" : " on (W - J)^T (W - J)";
  return rep;
}
namespace {

// The largest hop distance from `source` over W's pattern (column j lists the i with W_ij != 0;
// for a symmetric W those are j's neighbours), and the node where it is reached.
std::pair<int, int> farthest(const SparseMatrix& w, int source) {
  std::vector<int> dist(static_cast<std::size_t>(w.cols()), -1);
  std::deque<int> queue{source};
  dist[static_cast<std::size_t>(source)] = 0;
  std::pair<int, int> best{0, source};
  while (!queue.empty()) {
    const int j = queue.front();
    queue.pop_front();
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      const auto i = static_cast<std::size_t>(it.row());
      if (dist[i] >= 0) continue;
      dist[i] = dist[static_cast<std::size_t>(j)] + 1;
      best = std::max(best, {dist[i], static_cast<int>(i)});
      queue.push_back(static_cast<int>(i));
    }
  }
  return best;
}

}  // namespace

std::string LanczosEstimate::to_string() const {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "about %d steps (hop diameter >= %d), %.0f products with W at %s each: about %s",
                steps, diameter, products, format_duration_s(seconds_per_product).c_str(),
                format_duration_s(seconds).c_str());
  return buf;
}

LanczosEstimate lanczos_estimate(const std::vector<const SparseMatrix*>& ws,
                                 const SpectralOptions& options) {
  const SparseMatrix& w = *ws.front();
  LanczosEstimate e;
  e.diameter = farthest(w, farthest(w, 0).second).first;  // double sweep
  const int n = static_cast<int>(w.rows());
  e.steps = std::min({3 * e.diameter + 60, options.max_iterations, std::max(n, 8) * 4});
  // Symmetric W: two passes of one product per step. Otherwise Spectra on M^T M: 2 p products
  // per operator application, counted as one application per step (restarts add to it).
  const bool symmetric = ws.size() == 1 && spectral_internal::is_symmetric(w);
  e.products = symmetric ? 2.0 * e.steps : 2.0 * static_cast<double>(ws.size()) * e.steps;
  Eigen::VectorXd x = Eigen::VectorXd::Ones(n), y(n);
  Stopwatch watch;
  constexpr int kProbe = 3;
  for (int k = 0; k < kProbe; ++k) {
    y.noalias() = w * x;
    x.swap(y);
  }
  // Lanczos adds about two vector passes per product (projection, norms): 1.5x a bare product.
  e.seconds_per_product = 1.5 * watch.elapsed_seconds() / kProbe;
  e.seconds = e.products * e.seconds_per_product;
  return e;
}

}  // namespace gossip::topology

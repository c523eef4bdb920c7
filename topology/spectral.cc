// Spectral analysis. The three methods share one principle: never compute a small gap as the
// difference of two numbers near 1. The exact method sums w_g 2 sin^2(theta/2); the dense and
// Lanczos methods recompute 1 - lambda_2 and 1 + lambda_n from the eigenvector as sums over edges
// (Rayleigh quotients of I - W and I + W, with W's diagonal taken as 1 - its off-diagonal row sum).
#include "topology/spectral.h"

#include <Eigen/Dense>
#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "common/check.h"
#include "common/clock.h"
#include "common/random.h"

namespace gossip::topology {
namespace {

using RowMatrix = Eigen::SparseMatrix<double, Eigen::RowMajor>;
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// 1 - |lambda| from a = 1 - Re lambda and b = Im lambda without forming |lambda| first:
// 1 - |lambda|^2 = 2a - a^2 - b^2, and 1 - |lambda| = (1 - |lambda|^2) / (1 + |lambda|).
double log_modulus(double a, double b) { return 0.5 * std::log1p(-(2 * a - a * a - b * b)); }

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

// ---------------------------------------------------------------- exact (translation groups)

struct Group {
  std::vector<int> orders;
  std::vector<std::int64_t> stride;  // n / m_l: weight of digit l in R = sum_l r_l n / m_l
  std::vector<std::int64_t> place;   // mixed-radix place value of digit l in the node id
  std::int64_t n = 1;
};

Result<Group> make_group(const std::vector<int>& orders, std::int64_t n) {
  Group g;
  g.orders = orders;
  for (int m : orders) {
    if (m < 1) return invalid_argument("group order must be positive");
    g.n *= m;
  }
  if (orders.empty() || g.n != n)
    return invalid_argument("translation group of order " + std::to_string(g.n) +
                            " does not match " + std::to_string(n) + " nodes");
  const std::size_t k = orders.size();
  g.stride.resize(k);
  g.place.resize(k);
  std::int64_t p = 1;
  for (std::size_t l = k; l-- > 0;) {
    g.place[l] = p;
    p *= orders[l];
    g.stride[l] = n / orders[l];
  }
  return g;
}

// Row 0 of W as (digits of g, w_g), after checking that every row is its translate.
struct GroupRow {
  std::vector<std::vector<int>> digits;  // per entry
  std::vector<double> weight;
  std::vector<bool> is_identity;
};

Result<GroupRow> invariant_row(const RowMatrix& w, const Group& grp) {
  const std::size_t k = grp.orders.size();
  auto digits_of = [&](std::int64_t idx, std::vector<int>& d) {
    d.resize(k);
    for (std::size_t l = 0; l < k; ++l) d[l] = static_cast<int>((idx / grp.place[l]) % grp.orders[l]);
  };
  GroupRow row;
  std::vector<double> by_index(static_cast<std::size_t>(grp.n), 0.0);  // w_g indexed by node id of g
  std::vector<int> d;
  for (RowMatrix::InnerIterator it(w, 0); it; ++it) {
    if (it.value() == 0.0) continue;
    digits_of(it.col(), d);
    row.digits.push_back(d);
    row.weight.push_back(it.value());
    row.is_identity.push_back(it.col() == 0);
    by_index[static_cast<std::size_t>(it.col())] = it.value();
  }
  const std::size_t nnz0 = row.weight.size();
  std::vector<int> di, dj;
  for (std::int64_t i = 1; i < grp.n; ++i) {
    digits_of(i, di);
    std::size_t count = 0;
    for (RowMatrix::InnerIterator it(w, i); it; ++it) {
      if (it.value() == 0.0) continue;
      ++count;
      digits_of(it.col(), dj);
      std::int64_t g = 0;
      for (std::size_t l = 0; l < k; ++l)
        g += ((dj[l] - di[l] + grp.orders[l]) % grp.orders[l]) * grp.place[l];
      const double w0 = by_index[static_cast<std::size_t>(g)];
      if (std::abs(it.value() - w0) > 4 * kEps * std::max(std::abs(w0), 1e-300) || w0 == 0.0)
        return invalid_argument("W is not invariant under the translation group (row " +
                                std::to_string(i) + ", column " + std::to_string(it.col()) + ")");
    }
    if (count != nnz0)
      return invalid_argument("W is not invariant under the translation group (row " +
                              std::to_string(i) + " has " + std::to_string(count) +
                              " nonzeros, row 0 has " + std::to_string(nnz0) + ")");
  }
  return row;
}

// Per character k: accurate 1 - Re, 1 + Re and Im of lambda_k. The phase of w_g at k is
// theta = 2 pi R / n with R = sum_l (k_l g_l mod m_l) n / m_l reduced to (-n/2, n/2], an exact
// integer, so that 2 sin^2(pi R / n) has full relative accuracy even when R / n is tiny.
struct CharValue {
  double one_minus_re, one_plus_re, im;
};

template <typename Fn>
void for_each_character(const Group& grp, const GroupRow& row, Fn&& fn) {
  const std::size_t k = grp.orders.size();
  const std::size_t s = row.weight.size();
  std::vector<int> kd(k, 0);
  double identity_weight = 0.0;
  for (std::size_t e = 0; e < s; ++e)
    if (row.is_identity[e]) identity_weight += row.weight[e];
  // sin and cos of pi r / n for r = 0..n/2, computed once: the phases are exact integers r, so a
  // table replaces n * s transcendental calls by n/2 and loses nothing.
  const std::int64_t half_n = grp.n / 2;
  std::vector<double> sin_t(static_cast<std::size_t>(half_n) + 1), cos_t(sin_t.size());
  const double pi_over_n = std::numbers::pi / static_cast<double>(grp.n);
  for (std::int64_t r = 0; r <= half_n; ++r) {
    sin_t[static_cast<std::size_t>(r)] = std::sin(pi_over_n * static_cast<double>(r));
    cos_t[static_cast<std::size_t>(r)] = std::cos(pi_over_n * static_cast<double>(r));
  }
  for (std::int64_t idx = 0; idx < grp.n; ++idx) {
    double omr = 0.0, opr = 2.0 * identity_weight, im = 0.0;
    for (std::size_t e = 0; e < s; ++e) {
      if (row.is_identity[e]) continue;
      std::int64_t r = 0;
      for (std::size_t l = 0; l < k; ++l)
        r += (static_cast<std::int64_t>(kd[l]) * row.digits[e][l] % grp.orders[l]) * grp.stride[l];
      r %= grp.n;
      if (2 * r > grp.n) r -= grp.n;  // r in (-n/2, n/2]; theta / 2 = pi r / n
      const auto a = static_cast<std::size_t>(r < 0 ? -r : r);
      const double sh = r < 0 ? -sin_t[a] : sin_t[a], ch = cos_t[a];
      const double w = row.weight[e];
      omr += w * 2.0 * sh * sh;
      opr += w * 2.0 * ch * ch;
      im -= w * 2.0 * sh * ch;  // -sin(theta)
    }
    fn(idx, CharValue{omr, opr, im});
    // Next character in mixed radix (last digit fastest).
    for (std::size_t l = k; l-- > 0;) {
      if (++kd[l] < grp.orders[l]) break;
      kd[l] = 0;
    }
  }
}

Result<SpectralReport> exact_method(const std::vector<const SparseMatrix*>& ws,
                                    const std::vector<int>& orders) {
  const std::int64_t n = ws.front()->rows();
  GOSSIP_ASSIGN_OR_RETURN(const Group grp, make_group(orders, n));
  std::vector<GroupRow> rows;
  bool symmetric = ws.size() == 1;
  std::size_t terms = 0;
  for (const SparseMatrix* w : ws) {
    const RowMatrix r = *w;
    GOSSIP_ASSIGN_OR_RETURN(auto row, invariant_row(r, grp));
    terms = std::max(terms, row.weight.size());
    rows.push_back(std::move(row));
  }
  if (symmetric) symmetric = is_symmetric(*ws.front());

  SpectralReport rep;
  rep.method = SpectralMethod::kExact;
  rep.symmetric = symmetric;
  rep.num_nodes = static_cast<int>(n);
  rep.period = static_cast<int>(ws.size());
  std::string name = "Z_" + std::to_string(orders[0]);
  for (std::size_t l = 1; l < orders.size(); ++l) name += " x Z_" + std::to_string(orders[l]);
  if (orders.size() > 4 && std::all_of(orders.begin(), orders.end(), [](int m) { return m == 2; }))
    name = "(Z_2)^" + std::to_string(orders.size());
  rep.detail = std::string(orders.size() == 1 ? "circulant" : "translation-invariant") + " on " +
               name + ", " + std::to_string(terms) + " terms per eigenvalue";
  rep.residual = static_cast<double>(terms + 1) * kEps;

  if (ws.size() == 1) {
    double min_omr = INFINITY, min_opr = INFINITY, max_log_mod = -INFINITY, gap = INFINITY;
    double gap_nonsym = INFINITY;
    for_each_character(grp, rows[0], [&](std::int64_t k, const CharValue& c) {
      if (k == 0) return;
      min_omr = std::min(min_omr, c.one_minus_re);
      min_opr = std::min(min_opr, c.one_plus_re);
      gap = std::min({gap, c.one_minus_re, c.one_plus_re});
      const double lm = log_modulus(c.one_minus_re, c.im);
      if (lm > max_log_mod) {
        max_log_mod = lm;
        gap_nonsym = -std::expm1(lm);
      }
    });
    if (n == 1) {
      min_omr = min_opr = gap = gap_nonsym = 1.0;
      max_log_mod = -INFINITY;
    }
    if (symmetric) {
      rep.one_minus_lambda2 = min_omr;
      rep.one_plus_lambda_n = min_opr;
      rep.lambda2 = 1.0 - min_omr;
      rep.lambda_n = min_opr - 1.0;
      rep.gap = gap;
      rep.rho = 1.0 - gap;
      rep.abs_lambda2 = rep.rho;
    } else {
      rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
      rep.rho = std::exp(max_log_mod);
      rep.gap = gap_nonsym;
      rep.abs_lambda2 = rep.rho;  // W is normal
    }
  } else {
    // A product of matrices invariant under one abelian group has lambda_k = prod_t lambda_k(W_t).
    std::vector<double> log_mod(static_cast<std::size_t>(n), 0.0);
    for (const auto& row : rows)
      for_each_character(grp, row, [&](std::int64_t k, const CharValue& c) {
        log_mod[static_cast<std::size_t>(k)] += log_modulus(c.one_minus_re, c.im);
      });
    double best = -INFINITY;
    for (std::int64_t k = 1; k < n; ++k) best = std::max(best, log_mod[static_cast<std::size_t>(k)]);
    rep.symmetric = false;
    rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
    rep.rho = n == 1 ? 0.0 : std::exp(best);
    rep.gap = n == 1 ? 1.0 : -std::expm1(best);
    rep.abs_lambda2 = rep.rho;
    rep.detail += ", product of " + std::to_string(ws.size()) + " matrices";
  }
  return rep;
}

// ---------------------------------------------------------------- Rayleigh refinements

// v^T (I - W) v / v^T v = 1/2 sum_{i != j} W_ij (v_i - v_j)^2 / |v|^2 (W symmetric, exact row sums).
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

// ---------------------------------------------------------------- dense

Eigen::MatrixXd dense_product(const std::vector<const SparseMatrix*>& ws) {
  Eigen::MatrixXd p = Eigen::MatrixXd(*ws.front());
  for (std::size_t t = 1; t < ws.size(); ++t) p = (*ws[t]) * p;  // W(t) ... W(0)
  return p;
}

Result<SpectralReport> dense_method(const std::vector<const SparseMatrix*>& ws) {
  const int n = static_cast<int>(ws.front()->rows());
  SpectralReport rep;
  rep.method = SpectralMethod::kDense;
  rep.num_nodes = n;
  rep.period = static_cast<int>(ws.size());
  rep.symmetric = ws.size() == 1 && is_symmetric(*ws.front());
  if (rep.symmetric) {
    const Eigen::MatrixXd a = Eigen::MatrixXd(*ws.front());
    const bool vectors = n <= 600;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(
        a, vectors ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    if (es.info() != Eigen::Success) return internal_error("dense eigensolver failed");
    const auto& ev = es.eigenvalues();  // ascending; ev[n-1] = 1 for connected W
    if (n == 1) {
      fill_symmetric(rep, 1.0, 1.0);
      rep.detail = "dense (1 node)";
      return rep;
    }
    double omr = 1.0 - ev[n - 2], opr = 1.0 + ev[0];
    if (vectors) {
      const Eigen::VectorXd v2 = deflate(es.eigenvectors().col(n - 2));
      const Eigen::VectorXd vn = deflate(es.eigenvectors().col(0));
      omr = one_minus_rayleigh(*ws.front(), v2);
      opr = one_plus_rayleigh(*ws.front(), vn);
      rep.residual = std::max((a * v2 - ev[n - 2] * v2).norm() / v2.norm(),
                              (a * vn - ev[0] * vn).norm() / vn.norm());
      rep.detail = "dense SelfAdjointEigenSolver with eigenvectors, Rayleigh-refined gap";
    } else {
      rep.residual = n * kEps;  // backward-stable bound |W| n eps
      rep.detail = "dense SelfAdjointEigenSolver (eigenvalues only; residual is the n*eps bound)";
    }
    fill_symmetric(rep, omr, opr);
    return rep;
  }
  Eigen::MatrixXd p = dense_product(ws);
  Eigen::MatrixXd pj = p;
  pj.array() -= 1.0 / n;
  Eigen::BDCSVD<Eigen::MatrixXd> svd(pj);
  rep.rho = svd.singularValues()(0);
  rep.gap = 1.0 - rep.rho;
  Eigen::EigenSolver<Eigen::MatrixXd> es(p, false);
  std::vector<double> mods;
  for (int i = 0; i < n; ++i) mods.push_back(std::abs(es.eigenvalues()[i]));
  std::sort(mods.rbegin(), mods.rend());
  rep.abs_lambda2 = n > 1 ? mods[1] : 0.0;
  rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
  rep.residual = n * kEps;
  rep.detail = std::string("dense BDCSVD of ") + (ws.size() > 1 ? "the period's product - J" : "W - J") +
               " (residual is the n*eps bound)";
  return rep;
}

// ---------------------------------------------------------------- Lanczos (Spectra)

// x -> W x + (park - 1) mean(x) 1 for symmetric doubly-stochastic W: the all-ones eigenvalue 1
// moves to `park`, outside the end of the spectrum being computed, so lambda_2 (park = -2) or
// lambda_n (park = +2) is the extreme eigenvalue. (Parking it at 0 instead fails when 0 is itself
// extreme, as for lazy W: Lanczos then drifts towards the all-ones vector.)
class DeflatedSymOp {
 public:
  using Scalar = double;
  // `park`: the eigenvalue the all-ones direction gets; put it beyond the end being computed.
  DeflatedSymOp(const SparseMatrix& w, double park) : w_(w), park_(park) {}
  Eigen::Index rows() const { return w_.rows(); }
  Eigen::Index cols() const { return w_.cols(); }
  void perform_op(const double* x_in, double* y_out) const {
    Eigen::Map<const Eigen::VectorXd> x(x_in, rows());
    Eigen::Map<Eigen::VectorXd> y(y_out, rows());
    // W is symmetric, so W x = W^T x, and W^T of a column-major matrix is a row-major (gather)
    // product: no scattered writes. W maps 1-perp to itself (doubly stochastic), so adding
    // (park - 1) mean(x) 1 changes only the eigenvalue of the all-ones vector, from 1 to park.
    y.noalias() = w_.transpose() * x;
    y.array() += (park_ - 1.0) * x.mean();
  }

 private:
  const SparseMatrix& w_;
  double park_;
};

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

Result<SpectralReport> lanczos_method(const std::vector<const SparseMatrix*>& ws,
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
    // One solve per end, each with the all-ones direction parked beyond the other end.
    DeflatedSymOp op_top(w, -2.0), op_bottom(w, 2.0);
    GOSSIP_ASSIGN_OR_RETURN(auto top,
                            run_lanczos(op_top, Spectra::SortRule::LargestAlge, 1, o, rep));
    GOSSIP_ASSIGN_OR_RETURN(auto bottom,
                            run_lanczos(op_bottom, Spectra::SortRule::SmallestAlge, 1, o, rep));
    const double vals[2] = {top.first[0], bottom.first[0]};
    const Eigen::VectorXd v2 = deflate(top.second.col(0)), vn = deflate(bottom.second.col(0));
    Eigen::VectorXd y(n);
    op_top.perform_op(v2.data(), y.data());
    double residual = (y - vals[0] * v2).norm() / v2.norm();
    op_bottom.perform_op(vn.data(), y.data());
    residual = std::max(residual, (y - vals[1] * vn).norm() / vn.norm());
    if (!(residual < 1e-6))
      return internal_error("Lanczos converged to a poor eigenpair (residual " +
                            std::to_string(residual) + "); try --method dense");
    rep.residual = residual;
    fill_symmetric(rep, one_minus_rayleigh(w, v2), one_plus_rayleigh(w, vn));
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
      rep = lanczos_method(ws, o);
      break;
    case SpectralMethod::kAuto: {
      if (!o.symmetry.empty()) rep = exact_method(ws, o.symmetry);
      if (!rep.is_ok()) rep = exact_method(ws, {n});  // any circulant W
      if (!rep.is_ok()) {
        rep = n <= o.dense_max_nodes || n < 4 ? dense_method(ws) : lanczos_method(ws, o);
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

Result<SpectralMethod> parse_spectral_method(std::string_view name) {
  if (name == "auto") return SpectralMethod::kAuto;
  if (name == "exact") return SpectralMethod::kExact;
  if (name == "dense") return SpectralMethod::kDense;
  if (name == "lanczos" || name == "sparse") return SpectralMethod::kLanczos;
  return invalid_argument("unknown spectral method '" + std::string(name) +
                          "'; expected auto, exact, dense or lanczos");
}

std::string_view spectral_method_name(SpectralMethod method) {
  switch (method) {
    case SpectralMethod::kAuto: return "auto";
    case SpectralMethod::kExact: return "exact";
    case SpectralMethod::kDense: return "dense";
    case SpectralMethod::kLanczos: return "lanczos";
  }
  return "?";
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

Result<GroupSpectrum> group_spectrum(const SparseMatrix& w, const std::vector<int>& orders) {
  GOSSIP_ASSIGN_OR_RETURN(const Group grp, make_group(orders, w.rows()));
  const RowMatrix r = w;
  GOSSIP_ASSIGN_OR_RETURN(const auto row, invariant_row(r, grp));
  GroupSpectrum s;
  const auto n = static_cast<std::size_t>(grp.n);
  s.re.resize(n);
  s.im.resize(n);
  s.one_minus_re.resize(n);
  s.one_plus_re.resize(n);
  for_each_character(grp, row, [&](std::int64_t k, const CharValue& c) {
    const auto i = static_cast<std::size_t>(k);
    s.one_minus_re[i] = c.one_minus_re;
    s.one_plus_re[i] = c.one_plus_re;
    s.re[i] = 1.0 - c.one_minus_re;
    s.im[i] = c.im;
  });
  return s;
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
  return std::make_pair((d + 1.0) * rep.one_minus_lambda2, (d + 1.0) * (2.0 - rep.one_plus_lambda_n));
}

}  // namespace gossip::topology

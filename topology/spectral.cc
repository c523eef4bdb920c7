// Spectral analysis. The three methods share one principle: never compute a small gap as the
// difference of two numbers near 1. The exact method sums w_g 2 sin^2(theta/2); the dense and
// Lanczos methods recompute 1 - lambda_2 and 1 + lambda_n from the eigenvector as sums over edges
// (Rayleigh quotients of I - W and I + W, with W's diagonal taken as 1 - its off-diagonal row sum).
#include "topology/spectral.h"

#include <Spectra/SymEigsSolver.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "common/check.h"
#include "common/clock.h"
#include "common/enum_names.h"
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
    for (std::size_t l = 0; l < k; ++l)
      d[l] = static_cast<int>((idx / grp.place[l]) % grp.orders[l]);
  };
  GroupRow row;
  std::vector<double> by_index(static_cast<std::size_t>(grp.n),
                               0.0);  // w_g indexed by node id of g
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

Result<SpectralReport> walsh_method(const SparseMatrix& w);  // (Z_2)^d, below

// A necessary condition checked on the column-major W before any row-major copy: invariance gives
// W(i + t, j + t) = W(i, j), so column t is column 0 moved by t; tested for the generators t = e_l
// of the group. Rejects W that is not invariant (random graphs) in O(k nnz(column 0)).
Status columns_translate(const SparseMatrix& w, const Group& grp) {
  std::vector<std::pair<std::int64_t, double>> col0, moved, got;
  for (SparseMatrix::InnerIterator it(w, 0); it; ++it)
    if (it.value() != 0.0) col0.emplace_back(it.row(), it.value());
  for (std::size_t l = 0; l < grp.orders.size(); ++l) {
    const int m = grp.orders[l];
    const std::int64_t t = grp.place[l];
    if (m < 2) continue;
    moved.clear();
    for (auto [r, v] : col0) {
      const std::int64_t digit = (r / t) % m;
      moved.emplace_back(digit + 1 == m ? r - (m - 1) * t : r + t, v);
    }
    std::sort(moved.begin(), moved.end());
    got.clear();
    for (SparseMatrix::InnerIterator it(w, static_cast<Eigen::Index>(t)); it; ++it)
      if (it.value() != 0.0) got.emplace_back(it.row(), it.value());
    bool same = got.size() == moved.size();
    for (std::size_t e = 0; same && e < got.size(); ++e)
      same = got[e].first == moved[e].first &&
             std::abs(got[e].second - moved[e].second) <=
                 4 * kEps * std::max(std::abs(moved[e].second), 1e-300);
    if (!same)
      return invalid_argument("W is not invariant under the translation group (column " +
                              std::to_string(t) + " is not column 0 translated)");
  }
  return Status::ok();
}

Result<SpectralReport> exact_method(const std::vector<const SparseMatrix*>& ws,
                                    const std::vector<int>& orders) {
  const std::int64_t n = ws.front()->rows();
  GOSSIP_ASSIGN_OR_RETURN(const Group grp, make_group(orders, n));
  if (ws.size() == 1 && orders.size() > 1 &&
      std::all_of(orders.begin(), orders.end(), [](int m) { return m == 2; }))
    return walsh_method(*ws.front());
  std::vector<GroupRow> rows;
  bool symmetric = ws.size() == 1;
  std::size_t terms = 0;
  for (const SparseMatrix* w : ws) GOSSIP_RETURN_IF_ERROR(columns_translate(*w, grp));
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
    for (std::int64_t k = 1; k < n; ++k)
      best = std::max(best, log_mod[static_cast<std::size_t>(k)]);
    rep.symmetric = false;
    rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
    rep.rho = n == 1 ? 0.0 : std::exp(best);
    rep.gap = n == 1 ? 1.0 : -std::expm1(best);
    rep.abs_lambda2 = rep.rho;
    rep.detail += ", product of " + std::to_string(ws.size()) + " matrices";
  }
  return rep;
}

// ---------------------------------------------------------------- exact, (Z_2)^d: Walsh–Hadamard

// W invariant under XOR translations of node ids: W(i, j) = w(i ^ j) (hypercube and every weighted
// Cayley graph of (Z_2)^d). Such W is symmetric and its eigenvalues are the Walsh–Hadamard
// transform lambda_k = sum_g w_g (-1)^popcount(k & g). We carry E_k = sum of w_g with k.g even and
// O_k = sum with k.g odd through the fast transform (log2 n butterflies, O(n log n)), so that
// 1 - lambda_k = 2 O_k and 1 + lambda_k = 2 E_k come out as sums of the weights themselves, with no
// cancellation (row sums are 1). `w` is read by columns (CSC); XOR is its own inverse, so the
// columns are translates of column 0 exactly when the rows are translates of row 0.
struct WalshSpectrum {
  std::vector<double> even, odd;  // E_k, O_k
  bool exactly_symmetric = true;  // every entry equals w(i ^ j) bit for bit
  std::size_t terms = 0;          // nonzeros in column 0
};

Result<WalshSpectrum> walsh_spectrum(const SparseMatrix& w) {
  const std::int64_t n = w.rows();
  if (n < 1 || (n & (n - 1)) != 0)
    return invalid_argument("(Z_2)^d needs a power-of-two number of nodes, not " +
                            std::to_string(n));
  WalshSpectrum s;
  s.even.assign(static_cast<std::size_t>(n), 0.0);
  s.odd.assign(static_cast<std::size_t>(n), 0.0);
  std::vector<double>& w0 = s.even;  // column 0, transformed in place below
  for (SparseMatrix::InnerIterator it(w, 0); it; ++it)
    if (it.value() != 0.0) {
      w0[static_cast<std::size_t>(it.row())] = it.value();
      ++s.terms;
    }
  for (std::int64_t j = 1; j < n; ++j) {
    std::size_t count = 0;
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      if (it.value() == 0.0) continue;
      ++count;
      const double w0g = w0[static_cast<std::size_t>(it.row() ^ j)];
      if (it.value() != w0g) {
        if (std::abs(it.value() - w0g) > 4 * kEps * std::max(std::abs(w0g), 1e-300) || w0g == 0.0)
          return invalid_argument("W is not invariant under the translation group (row " +
                                  std::to_string(it.row()) + ", column " + std::to_string(j) + ")");
        s.exactly_symmetric = false;
      }
    }
    if (count != s.terms)
      return invalid_argument("W is not invariant under the translation group (column " +
                              std::to_string(j) + " has " + std::to_string(count) +
                              " nonzeros, column 0 has " + std::to_string(s.terms) + ")");
  }
  // Butterfly on bit h: index x (bit clear) and y = x | h hold the partial sums for g_h = 0 and
  // g_h = 1; afterwards x holds character bit k_h = 0 (parity unchanged) and y k_h = 1 (g_h = 1
  // flips the parity).
  double* e = s.even.data();
  double* o = s.odd.data();
  for (std::int64_t h = 1; h < n; h <<= 1)
    for (std::int64_t base = 0; base < n; base += 2 * h)
      for (std::int64_t x = base; x < base + h; ++x) {
        const std::int64_t y = x + h;
        const double ex = e[x], ox = o[x], ey = e[y], oy = o[y];
        e[x] = ex + ey;
        o[x] = ox + oy;
        e[y] = ex + oy;
        o[y] = ox + ey;
      }
  return s;
}

Result<SpectralReport> walsh_method(const SparseMatrix& w) {
  GOSSIP_ASSIGN_OR_RETURN(const WalshSpectrum s, walsh_spectrum(w));
  const std::int64_t n = w.rows();
  int d = 0;
  while ((std::int64_t{1} << d) < n) ++d;
  SpectralReport rep;
  rep.method = SpectralMethod::kExact;
  rep.num_nodes = static_cast<int>(n);
  rep.symmetric = s.exactly_symmetric;
  rep.detail = "translation-invariant on (Z_2)^" + std::to_string(d) +
               ", fast Walsh-Hadamard transform of " + std::to_string(s.terms) + " terms";
  rep.residual = static_cast<double>(d + 1) * kEps;  // d + 1 rounded additions of positive terms
  double min_omr = INFINITY, min_opr = INFINITY;
  for (std::int64_t k = 1; k < n; ++k) {
    min_omr = std::min(min_omr, 2.0 * s.odd[static_cast<std::size_t>(k)]);
    min_opr = std::min(min_opr, 2.0 * s.even[static_cast<std::size_t>(k)]);
  }
  if (n == 1) min_omr = min_opr = 1.0;
  const double gap = std::min(min_omr, min_opr);
  rep.gap = gap;
  rep.rho = 1.0 - gap;
  rep.abs_lambda2 = rep.rho;  // eigenvalues are real; W is normal
  if (rep.symmetric) {
    rep.one_minus_lambda2 = min_omr;
    rep.one_plus_lambda_n = min_opr;
    rep.lambda2 = 1.0 - min_omr;
    rep.lambda_n = min_opr - 1.0;
  } else {
    rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
  }
  return rep;
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
                                             const Eigen::VectorXd* start) {
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
  rep.detail = std::string("dense BDCSVD of ") +
               (ws.size() > 1 ? "the period's product - J" : "W - J") +
               " (residual is the n*eps bound)";
  return rep;
}

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
    SparseMatrix compressed;
    const SparseMatrix* wc = &w;
    if (!w.isCompressed()) {
      compressed = w;
      compressed.makeCompressed();
      wc = &compressed;
    }
    GOSSIP_ASSIGN_OR_RETURN(const SymmetricExtremes ex,
                            symmetric_extremes(*wc, o.tolerance, o.max_iterations));
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

Result<GroupSpectrum> group_spectrum(const SparseMatrix& w, const std::vector<int>& orders) {
  GOSSIP_ASSIGN_OR_RETURN(const Group grp, make_group(orders, w.rows()));
  if (orders.size() > 1 &&
      std::all_of(orders.begin(), orders.end(), [](int m) { return m == 2; })) {
    GOSSIP_ASSIGN_OR_RETURN(const WalshSpectrum ws, walsh_spectrum(w));
    GroupSpectrum s;
    s.one_minus_re.resize(ws.odd.size());
    s.one_plus_re.resize(ws.odd.size());
    s.re.resize(ws.odd.size());
    s.im.assign(ws.odd.size(), 0.0);
    for (std::size_t k = 0; k < ws.odd.size(); ++k) {
      s.one_minus_re[k] = 2.0 * ws.odd[k];
      s.one_plus_re[k] = 2.0 * ws.even[k];
      s.re[k] = ws.even[k] - ws.odd[k];
    }
    return s;
  }
  GOSSIP_RETURN_IF_ERROR(columns_translate(w, grp));
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
  return std::make_pair((d + 1.0) * rep.one_minus_lambda2,
                        (d + 1.0) * (2.0 - rep.one_plus_lambda_n));
}

}  // namespace gossip::topology

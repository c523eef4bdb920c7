// Spectral analysis, exact method: W invariant under a translation group Z_m1 x ... x Z_mk, whose
// eigenvalues are the group's Fourier transform of row 0 (circulant W, tori), and the (Z_2)^d case
// (hypercubes) by a fast Walsh-Hadamard transform; also group_spectrum, every eigenvalue of such a
// W. Small gaps are sums of positive terms (w_g 2 sin^2(theta/2)), never differences near 1.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "topology/spectral.h"
#include "topology/spectral_internal.h"

namespace gossip::topology {
namespace {

using spectral_internal::is_symmetric;
using spectral_internal::kEps;
using spectral_internal::kNaN;

using RowMatrix = Eigen::SparseMatrix<double, Eigen::RowMajor>;

// 1 - |lambda| from a = 1 - Re lambda and b = Im lambda without forming |lambda| first:
// 1 - |lambda|^2 = 2a - a^2 - b^2, and 1 - |lambda| = (1 - |lambda|^2) / (1 + |lambda|).
double log_modulus(double a, double b) { return 0.5 * std::log1p(-(2 * a - a * a - b * b)); }

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

}  // namespace

Result<SpectralReport> spectral_internal::exact_method(const std::vector<const SparseMatrix*>& ws,
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

namespace {

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
}  // namespace

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
}  // namespace gossip::topology

// Gossip mixing over the state matrix. The kernel is a row-blocked CSR gather: for a block of
// rows, every node's output segment is the weighted sum of its in-neighbours' segments. A block of
// all n columns fits in the L2 cache, so however many neighbours read a column, it comes from
// memory once per call: traffic is one read of X and one write of the output, the same as a copy.
#include "sim/node_state.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/check.h"

namespace gossip::sim {

Result<MixingPlan> MixingPlan::from_matrix(const Eigen::SparseMatrix<double>& w) {
  if (w.rows() != w.cols() || w.rows() == 0) {
    return invalid_argument("mixing matrix must be square and non-empty, got " +
                            std::to_string(w.rows()) + "x" + std::to_string(w.cols()));
  }
  MixingPlan p;
  p.num_nodes_ = static_cast<int>(w.rows());
  const int n = p.num_nodes_;
  // Row-major copy so that row i (node i's in-weights) is contiguous and sorted by column.
  Eigen::SparseMatrix<double, Eigen::RowMajor> rows = w;
  rows.makeCompressed();
  p.in_neighbours_.assign(n, {});
  p.row_begin_.assign(n + 1, 0);
  std::vector<int> out_degree(n, 0);
  for (int i = 0; i < n; ++i) {
    p.row_begin_[i] = static_cast<int>(p.column_.size());
    for (Eigen::SparseMatrix<double, Eigen::RowMajor>::InnerIterator it(rows, i); it; ++it) {
      const double v = it.value();
      if (!std::isfinite(v) || v < 0) {
        return invalid_argument("mixing matrix entry W(" + std::to_string(i) + "," +
                                std::to_string(it.col()) + ") = " + std::to_string(v) +
                                " is not a finite nonnegative weight");
      }
      if (v == 0) continue;  // explicit zeros are not edges
      const int j = static_cast<int>(it.col());
      p.column_.push_back(j);
      p.weight_.push_back(static_cast<float>(v));
      if (j != i) {
        p.in_neighbours_[i].push_back(j);
        ++out_degree[j];
      }
    }
  }
  p.row_begin_[n] = static_cast<int>(p.column_.size());
  for (int i = 0; i < n; ++i) {
    p.max_degree_ = std::max({p.max_degree_, static_cast<int>(p.in_neighbours_[i].size()),
                              out_degree[i]});
  }
  return p;
}

namespace {

constexpr Eigen::Index kTile = 256;  // floats accumulated per output tile (1 KiB, L1-resident)

// acc[k] = w·src[k] and acc[k] = fma(w, src[k], acc[k]): separate, not inlined functions so that the
// restrict qualifiers hold (GCC ignores them on block-scope pointers and otherwise vectorises the
// caller across terms with gathers, five times slower).
[[gnu::noinline]] void scale_into(float* __restrict acc, const float* __restrict src, float w,
                       Eigen::Index len) {
  for (Eigen::Index k = 0; k < len; ++k) acc[k] = w * src[k];
}
[[gnu::noinline]] void fma_into(float* __restrict acc, const float* __restrict src, float w,
                     Eigen::Index len) {
  for (Eigen::Index k = 0; k < len; ++k) acc[k] = std::fma(w, src[k], acc[k]);
}

// o[0..len) = Σ_q w_q · x_{col_q}[0..len) − γ u with len ≤ kTile, accumulated in a small buffer
// that stays in L1 so that each output is stored once however many terms there are. `x` points at
// the block's first row of column 0 (stride d).
inline void mix_tile(float* __restrict o, const float* x, Eigen::Index d, const int* col,
                     const float* w, int terms, float gamma, const float* __restrict u,
                     Eigen::Index len) {
  alignas(64) float acc[kTile];
  scale_into(acc, x + static_cast<Eigen::Index>(col[0]) * d, w[0], len);
  for (int q = 1; q < terms; ++q) {
    fma_into(acc, x + static_cast<Eigen::Index>(col[q]) * d, w[q], len);
  }
  if (u != nullptr) {
    for (Eigen::Index k = 0; k < len; ++k) o[k] = std::fma(-gamma, u[k], acc[k]);
  } else {
    for (Eigen::Index k = 0; k < len; ++k) o[k] = acc[k];
  }
}

}  // namespace

void mix(const MixingPlan& plan, const StateMatrix& x, float gamma, const StateMatrix* update,
         StateMatrix& out) {
  const int n = plan.num_nodes();
  GOSSIP_CHECK_EQ(x.cols(), n);
  GOSSIP_CHECK(out.data() != x.data()) << "mix() output aliases its input";
  if (update != nullptr) {
    GOSSIP_CHECK_EQ(update->rows(), x.rows());
    GOSSIP_CHECK_EQ(update->cols(), x.cols());
    GOSSIP_CHECK(out.data() != update->data()) << "mix() output aliases its update";
  }
  const Eigen::Index d = x.rows();
  out.resize(d, n);
  if (d == 0) return;
  // Rows per block: keep a block of all n input columns around 512 KiB (L2-resident), in whole
  // multiples of kTile floats so that the inner loops run on full tiles.
  const Eigen::Index target = (512 * 1024) / (static_cast<Eigen::Index>(sizeof(float)) * n);
  const Eigen::Index block = std::min<Eigen::Index>(d, std::max<Eigen::Index>(kTile, target / kTile * kTile));
  const int* row_begin = plan.row_begin().data();
  const int* column = plan.column().data();
  const float* weight = plan.weight().data();
  const float* in = x.data();
  const float* upd = update != nullptr ? update->data() : nullptr;
  float* result = out.data();
  for (Eigen::Index r0 = 0; r0 < d; r0 += block) {
    const Eigen::Index len = std::min(block, d - r0);
    for (int i = 0; i < n; ++i) {
      const Eigen::Index offset = static_cast<Eigen::Index>(i) * d + r0;
      float* o = result + offset;
      const int b = row_begin[i], e = row_begin[i + 1];
      if (b == e) {
        std::fill(o, o + len, 0.0f);
        continue;
      }
      const float* u = upd != nullptr ? upd + offset : nullptr;
      for (Eigen::Index k0 = 0; k0 < len; k0 += kTile) {
        mix_tile(o + k0, in + r0 + k0, d, column + b, weight + b, e - b, gamma,
                 u != nullptr ? u + k0 : nullptr, std::min(kTile, len - k0));
      }
    }
  }
}

Eigen::VectorXd node_average(const StateMatrix& x) {
  Eigen::VectorXd sum = Eigen::VectorXd::Zero(x.rows());
  for (Eigen::Index i = 0; i < x.cols(); ++i) sum += x.col(i).cast<double>();
  return x.cols() > 0 ? Eigen::VectorXd(sum / static_cast<double>(x.cols())) : sum;
}

double consensus_distance(const StateMatrix& x) {
  if (x.cols() == 0) return 0;
  const Eigen::VectorXd mean = node_average(x);
  double total = 0;
  for (Eigen::Index i = 0; i < x.cols(); ++i) {
    total += (x.col(i).cast<double>() - mean).squaredNorm();
  }
  return total / static_cast<double>(x.cols());
}

}  // namespace gossip::sim

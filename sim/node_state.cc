// Gossip mixing over the state matrix. The kernel is a row-blocked, register-tiled CSR gather: for
// a block of rows, every node's output segment is the weighted sum of its in-neighbours' segments,
// 64 rows at a time with the accumulator in registers across all of the node's terms (one load per
// term and vector, one store per output). A block of all n columns fits in the L2 cache, so however
// many neighbours read a column, it comes from memory once per call: traffic is one read of X and
// one write of the output, the same as a copy.
#include "sim/node_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/check.h"
#include "sgd/cpu/simd16.h"

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

using sgd::cpu::F16;

// Output rows per register tile: 64 floats = four 16-float vectors. The accumulator of a tile
// stays in registers for all of a node's terms, so each output is stored once and each term costs
// one load per vector (no accumulator reload and store per term).
constexpr Eigen::Index kTile = 64;

// o[0..kTile) = Σ_q w_q · x_{col_q}[0..kTile) − γ u, rounded exactly like sgd::Backend::mix:
// acc = w_0·x_0, acc = fma(w_q, x_q, acc) for q ≥ 1, out = fma(−γ, u, acc). `x` points at the
// tile's first row of column 0 (stride d).
template <bool kUpdate>
inline void mix_tile_full(float* o, const float* x, Eigen::Index d, const int* col,
                          const float* w, int terms, float neg_gamma, const float* u) {
  const float* src = x + static_cast<Eigen::Index>(col[0]) * d;
  F16 a0 = F16::mul(w[0], F16::load(src));
  F16 a1 = F16::mul(w[0], F16::load(src + 16));
  F16 a2 = F16::mul(w[0], F16::load(src + 32));
  F16 a3 = F16::mul(w[0], F16::load(src + 48));
  for (int q = 1; q < terms; ++q) {
    src = x + static_cast<Eigen::Index>(col[q]) * d;
    const float wq = w[q];
    a0 = F16::fma(wq, F16::load(src), a0);
    a1 = F16::fma(wq, F16::load(src + 16), a1);
    a2 = F16::fma(wq, F16::load(src + 32), a2);
    a3 = F16::fma(wq, F16::load(src + 48), a3);
  }
  if constexpr (kUpdate) {
    a0 = F16::fma(neg_gamma, F16::load(u), a0);
    a1 = F16::fma(neg_gamma, F16::load(u + 16), a1);
    a2 = F16::fma(neg_gamma, F16::load(u + 32), a2);
    a3 = F16::fma(neg_gamma, F16::load(u + 48), a3);
  }
  a0.store(o);
  a1.store(o + 16);
  a2.store(o + 32);
  a3.store(o + 48);
}

// acc[k] = w·src[k] and acc[k] = fma(w, src[k], acc[k]) for the partial tile at the end of a
// block: separate, not inlined functions so that the restrict qualifiers hold (GCC ignores them on
// block-scope pointers and otherwise vectorises the caller across terms with gathers).
[[gnu::noinline]] void scale_into(float* __restrict acc, const float* __restrict src, float w,
                                  Eigen::Index len) {
  for (Eigen::Index k = 0; k < len; ++k) acc[k] = w * src[k];
}
[[gnu::noinline]] void fma_into(float* __restrict acc, const float* __restrict src, float w,
                                Eigen::Index len) {
  for (Eigen::Index k = 0; k < len; ++k) acc[k] = std::fma(w, src[k], acc[k]);
}

// One node's sum for the rows of a block past its last full tile (len < kTile), accumulated in
// an L1-resident buffer.
void mix_tile_tail(float* __restrict o, const float* x, Eigen::Index d, const int* col,
                   const float* w, int terms, float neg_gamma, const float* __restrict u,
                   Eigen::Index len) {
  alignas(64) float acc[kTile];
  scale_into(acc, x + static_cast<Eigen::Index>(col[0]) * d, w[0], len);
  for (int q = 1; q < terms; ++q) {
    fma_into(acc, x + static_cast<Eigen::Index>(col[q]) * d, w[q], len);
  }
  if (u != nullptr) {
    for (Eigen::Index k = 0; k < len; ++k) o[k] = std::fma(neg_gamma, u[k], acc[k]);
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
  const Eigen::Index block =
      std::min<Eigen::Index>(d, std::max<Eigen::Index>(kTile, target / kTile * kTile));
  const int* row_begin = plan.row_begin().data();
  const int* column = plan.column().data();
  const float* weight = plan.weight().data();
  const float* in = x.data();
  const float* upd = update != nullptr ? update->data() : nullptr;
  float* result = out.data();
  const float neg_gamma = -gamma;
  for (Eigen::Index r0 = 0; r0 < d; r0 += block) {
    const Eigen::Index len = std::min(block, d - r0);
    const Eigen::Index full = len / kTile * kTile;
    for (int i = 0; i < n; ++i) {
      const Eigen::Index offset = static_cast<Eigen::Index>(i) * d + r0;
      float* o = result + offset;
      const int b = row_begin[i], e = row_begin[i + 1];
      if (b == e) {
        std::fill(o, o + len, 0.0f);
        continue;
      }
      const float* u = upd != nullptr ? upd + offset : nullptr;
      const float* xb = in + r0;
      if (u != nullptr) {
        for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
          mix_tile_full<true>(o + k0, xb + k0, d, column + b, weight + b, e - b, neg_gamma,
                              u + k0);
        }
      } else {
        for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
          mix_tile_full<false>(o + k0, xb + k0, d, column + b, weight + b, e - b, neg_gamma,
                               nullptr);
        }
      }
      if (full < len) {
        mix_tile_tail(o + full, xb + full, d, column + b, weight + b, e - b, neg_gamma,
                      u != nullptr ? u + full : nullptr, len - full);
      }
    }
  }
}

void mix_node(const MixingPlan& plan, const StateMatrix& x, int i, float gamma, const float* u,
              float* out_col) {
  GOSSIP_CHECK_EQ(x.cols(), plan.num_nodes());
  GOSSIP_CHECK(i >= 0 && i < plan.num_nodes()) << "node " << i;
  const Eigen::Index d = x.rows();
  const int b = plan.row_begin()[i], e = plan.row_begin()[i + 1];
  if (b == e) {
    std::fill(out_col, out_col + d, 0.0f);
    return;
  }
  const int* column = plan.column().data() + b;
  const float* weight = plan.weight().data() + b;
  const float neg_gamma = -gamma;
  const float* in = x.data();
  const Eigen::Index full = d / kTile * kTile;
  if (u != nullptr) {
    for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
      mix_tile_full<true>(out_col + k0, in + k0, d, column, weight, e - b, neg_gamma, u + k0);
    }
  } else {
    for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
      mix_tile_full<false>(out_col + k0, in + k0, d, column, weight, e - b, neg_gamma, nullptr);
    }
  }
  if (full < d) {
    mix_tile_tail(out_col + full, in + full, d, column, weight, e - b, neg_gamma,
                  u != nullptr ? u + full : nullptr, d - full);
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

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
  // Rows per block: keep a block of all n input columns near 128 KiB (L2-resident), at least one
  // cache line per column and a multiple of 16 floats so the inner loop vectorises cleanly.
  const Eigen::Index target = (128 * 1024) / (static_cast<Eigen::Index>(sizeof(float)) * n);
  const Eigen::Index block = std::min<Eigen::Index>(d, std::max<Eigen::Index>(16, target / 16 * 16));
  const int* row_begin = plan.row_begin().data();
  const int* column = plan.column().data();
  const float* weight = plan.weight().data();
  const float* in = x.data();
  const float* upd = update != nullptr ? update->data() : nullptr;
  float* result = out.data();
  for (Eigen::Index r0 = 0; r0 < d; r0 += block) {
    const Eigen::Index len = std::min(block, d - r0);
    for (int i = 0; i < n; ++i) {
      float* __restrict o = result + static_cast<Eigen::Index>(i) * d + r0;
      const int b = row_begin[i], e = row_begin[i + 1];
      if (b == e) {
        std::fill(o, o + len, 0.0f);
        continue;
      }
      {
        const float w = weight[b];
        const float* __restrict src = in + static_cast<Eigen::Index>(column[b]) * d + r0;
        for (Eigen::Index k = 0; k < len; ++k) o[k] = w * src[k];
      }
      for (int q = b + 1; q < e; ++q) {
        const float w = weight[q];
        const float* __restrict src = in + static_cast<Eigen::Index>(column[q]) * d + r0;
        for (Eigen::Index k = 0; k < len; ++k) o[k] = std::fma(w, src[k], o[k]);
      }
      if (upd != nullptr) {
        const float* __restrict u = upd + static_cast<Eigen::Index>(i) * d + r0;
        for (Eigen::Index k = 0; k < len; ++k) o[k] = std::fma(-gamma, u[k], o[k]);
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

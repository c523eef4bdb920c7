// MixingPlan and the instruction-set dispatch of the mixing kernels (node_state_kernels.cc).
#include "sim/node_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/check.h"
#include "sim/node_state_kernels.h"

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
  // Runs of banded rows: row i's columns are i + offset + q (q < terms, no wrap), with the weights
  // of the run's first row.
  auto banded = [&](int i) {
    const int b = p.row_begin_[i], terms = p.row_begin_[i + 1] - b;
    if (terms < 2 || terms > kMaxBandTerms) return false;
    for (int q = 1; q < terms; ++q) {
      if (p.column_[b + q] != p.column_[b] + q) return false;
    }
    return true;
  };
  auto continues = [&](const Band& band, int i) {
    const int b = p.row_begin_[i], b0 = p.row_begin_[band.first];
    if (!banded(i) || p.row_begin_[i + 1] - b != band.terms) return false;
    if (p.column_[b] - i != band.offset) return false;
    return std::equal(p.weight_.begin() + b, p.weight_.begin() + b + band.terms,
                      p.weight_.begin() + b0);
  };
  for (int i = 0; i < n;) {
    if (!banded(i)) {
      ++i;
      continue;
    }
    Band band;
    band.first = i;
    band.count = 1;
    band.terms = p.row_begin_[i + 1] - p.row_begin_[i];
    band.offset = p.column_[p.row_begin_[i]] - i;
    while (i + band.count < n && continues(band, i + band.count)) ++band.count;
    if (band.count >= 2) p.bands_.push_back(band);
    i += band.count;
  }
  for (int i = 0; i < n; ++i) {
    p.max_degree_ =
        std::max({p.max_degree_, static_cast<int>(p.in_neighbours_[i].size()), out_degree[i]});
  }
  return p;
}

void mix(const MixingPlan& plan, const StateMatrix& x, float gamma, const StateMatrix* update,
         StateMatrix& out) {
  GOSSIP_ISA_PICK(gossip::sim, mix)(plan, x, gamma, update, out);
}

void mix_node(const MixingPlan& plan, const StateMatrix& x, int i, float gamma, const float* u,
              float* out_col) {
  GOSSIP_ISA_PICK(gossip::sim, mix_node)(plan, x, i, gamma, u, out_col);
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

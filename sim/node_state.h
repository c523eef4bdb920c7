// The state of n simulated nodes: their models as the columns of one d×n float32 matrix X
// (column-major, so column i is node i's flat parameter vector, contiguous — the same buffer a
// gossipd process holds), and the gossip step X ← X·Wᵀ for a sparse mixing matrix W.
//
// Mixing semantics (docs/design.md §1): x_i ← Σ_j W_ij x_j − γ u_i over j ∈ N_in(i) ∪ {i}: row i
// of W holds node i's in-weights. Rounding is exactly that of sgd::Backend::mix called with the
// terms in increasing j (self included at its place) and float32 weights: acc = w_0·x_0, then
// acc = fma(w_j, x_j, acc), then out = fma(−γ, u, acc). A gossipd node that orders its terms the
// same way computes the same bits (tests/sim/node_state_test.cc holds the two against each other).
//
// Thread safety: MixingPlan is immutable after construction and may be shared; mix() writes only
// its output.
#pragma once

#include <Eigen/Core>
#include <Eigen/SparseCore>
#include <vector>

#include "common/status.h"

namespace gossip::sim {

using StateMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// Row i of W in compressed form: node i's in-neighbours (including itself when W_ii > 0) and
// weights, in increasing neighbour order.
class MixingPlan {
 public:
  // Validates that W is square, finite and nonnegative. Double stochasticity is not required
  // here (the topology module validates W); it is what preserves the average.
  static Result<MixingPlan> from_matrix(const Eigen::SparseMatrix<double>& w);

  int num_nodes() const { return num_nodes_; }
  // Largest in- or out-degree, self loops excluded: Δ of the cost model.
  int max_degree() const { return max_degree_; }
  // In-neighbours of each node, self excluded (who node i waits for).
  const std::vector<std::vector<int>>& in_neighbours() const { return in_neighbours_; }

  // CSR arrays: the entries of row i are [row_begin[i], row_begin[i + 1]).
  const std::vector<int>& row_begin() const { return row_begin_; }
  const std::vector<int>& column() const { return column_; }
  const std::vector<float>& weight() const { return weight_; }

  // A run of consecutive rows [first, first + count) (count ≥ 2) whose terms are the contiguous
  // columns i + offset, ..., i + offset + terms − 1 (no wrap-around, 2 ≤ terms ≤ kMaxBandTerms)
  // with the same weights in every row: a ring's rows 1..n−2, any circulant band. mix() forms such
  // rows with a sliding window of input columns held in registers (one load per input vector
  // instead of one per term), with the same operations per element.
  struct Band {
    int first = 0;
    int count = 0;
    int offset = 0;
    int terms = 0;
  };
  static constexpr int kMaxBandTerms = 5;
  const std::vector<Band>& bands() const { return bands_; }

 private:
  int num_nodes_ = 0;
  int max_degree_ = 0;
  std::vector<std::vector<int>> in_neighbours_;
  std::vector<int> row_begin_;
  std::vector<int> column_;
  std::vector<float> weight_;
  std::vector<Band> bands_;  // increasing, disjoint
};

// out = X·Wᵀ − γ·U, i.e. out.col(i) = Σ_j W_ij X.col(j) − γ U.col(i); `update` may be null (pure
// gossip, out = X·Wᵀ). `out` must alias neither input; it is resized. Cache-blocked over rows so
// that each column of X is read from memory once per call; register-tiled (64 rows of one output
// node in registers across all of its terms).
void mix(const MixingPlan& plan, const StateMatrix& x, float gamma, const StateMatrix* update,
         StateMatrix& out);

// Column i of mix(plan, x, γ, U, out) with U.col(i) = u (null: no update term), written to
// out_col (x.rows() floats, aliasing neither x nor u): the same tiles and operations, so the same
// bits. For a caller that forms node i's output as soon as node i's update exists (the simulator's
// combine-then-adapt step), while u is still in L1.
void mix_node(const MixingPlan& plan, const StateMatrix& x, int i, float gamma, const float* u,
              float* out_col);

// Rows of a state matrix that holds d parameters per node in the simulator's layout: d rounded up
// to a multiple of 16 floats, so that every column fills whole 64-byte lines (the padding rows are
// zero and mixing keeps them zero).
inline Eigen::Index padded_rows(Eigen::Index d) { return (d + 15) / 16 * 16; }

// x̄ = (1/n) Σ_i x_i, accumulated in double.
Eigen::VectorXd node_average(const StateMatrix& x);

// Consensus distance (1/n) Σ_i ‖x_i − x̄‖², accumulated in double.
double consensus_distance(const StateMatrix& x);

}  // namespace gossip::sim

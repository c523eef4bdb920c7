// The CPU reference of every model (model_spec.h), templated on the scalar type: float is what the
// cpu backend trains with; double is what the gradient checks use (central finite differences
// need the precision). Eigen GEMMs over Maps into the flat parameter vector — no copies of weights.
//
// Shapes: x is input_dim × B column-major (= a row-major batch of B examples); activations are
// width × B. Not thread-safe per workspace; Eigen may use several threads inside one GEMM.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "sgd/model_spec.h"

namespace gossip::sgd::cpu {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

// Scratch reused across calls: post-activation outputs of every layer and one delta per layer.
template <typename T>
struct Workspace {
  std::vector<Mat<T>> act;    // act[l]: output of layer l (ReLU applied on hidden layers)
  std::vector<Mat<T>> delta;  // dLoss/dz of layer l
};

// Mean loss over the B examples plus (l2/2)·Σ‖W‖²; gradient into `grad` (num_params). `labels`
// (classification) or `targets` (least_squares) hold B entries; the other may be null.
template <typename T>
T loss_and_grad(const ModelSpec& spec, const T* params, const T* x, const std::int32_t* labels,
                const T* targets, int batch, T* grad, Workspace<T>& ws);

// Sum over the B examples of the data loss (no l2), and the number classified correctly (0 for
// least_squares).
template <typename T>
void loss_sum_and_correct(const ModelSpec& spec, const T* params, const T* x,
                          const std::int32_t* labels, const T* targets, int batch, Workspace<T>& ws,
                          double* loss_sum, std::int64_t* correct);

// The linear models with one output (least_squares, logistic: layer sizes {m, 1}), what the cpu
// backend trains them with: the same loss and gradient as loss_and_grad<float>, read from B example
// rows given by pointer (rows of a gathered batch, or rows of a data set in place), so a batch and
// its rows read in place give identical bits. The summation order is fixed here, independent of
// the instruction set: each dot product accumulates in 16 interleaved lanes (lane k mod 16, fused
// multiply-adds), reduced pairwise (8, 4, 2, 1); each gradient entry sums the rows in order
// (acc = δ_0·x_0k, acc = fma(δ_j, x_jk, acc)); the bias gradient and the loss sum rows in order.
// `labels` (logistic) or `targets` (least_squares) hold B entries; the other may be null.
bool is_linear(const ModelSpec& spec);
float linear_loss_and_grad(const ModelSpec& spec, const float* params, const float* const* rows,
                           const std::int32_t* labels, const float* targets, int batch,
                           float* grad);

}  // namespace gossip::sgd::cpu

// The CPU reference of every model (model_spec.h), templated on the scalar type: float is what the
// cpu backend trains with; double is what the gradient checks use (central finite differences
// need the precision). Eigen GEMMs over Maps into the flat parameter vector — no copies of weights.
//
// Shapes: x is input_dim × B column-major (= a row-major batch of B examples); activations are
// width × B. Not thread-safe per workspace; Eigen may use several threads inside one GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

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

}  // namespace gossip::sgd::cpu

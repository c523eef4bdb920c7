// ModelSpec: what a model is, independent of where it runs. Every model of gossip_sgd is a dense
// feed-forward network over one flat float32 parameter vector; the kind fixes the output layer and
// the loss:
//
//   least_squares  input -> 1, loss (1/2B) Σ (ŷ − y)²                   (linear regression)
//   logistic       input -> 1, loss (1/B) Σ log(1 + e^{−s·ŷ}), s = ±1   (binary, labels 0/1)
//   softmax        input -> C, softmax cross-entropy                      (multinomial regression)
//   mlp            input -> h_1 -> ... -> h_k -> C, ReLU between layers, softmax cross-entropy
//
// plus (l2/2)·Σ‖W_l‖² over the weight matrices (not the biases) when l2 > 0.
//
// Layout of the flat parameter vector (the contract gossip, checkpoints and both backends share):
// for every layer l in order, W_l as a column-major out_l × in_l matrix, then b_l (out_l floats).
// Column-major W_l means W_l(r, c) sits at offset r + c·out_l, which is what Eigen's default
// Map and cuBLAS both expect. Activations are column-major features × batch, so a row-major batch
// of B examples is directly an in × B matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/status.h"

namespace gossip::sgd {

enum class ModelKind { kLeastSquares, kLogistic, kSoftmax, kMlp };
inline constexpr EnumTable<ModelKind, 4> kModelKinds{"model kind",
                                                     {{ModelKind::kLeastSquares, "least_squares"},
                                                      {ModelKind::kLogistic, "logistic"},
                                                      {ModelKind::kSoftmax, "softmax"},
                                                      {ModelKind::kMlp, "mlp"}}};

// The loss attached to the output layer.
enum class OutputLoss { kSquared, kBinaryLogistic, kSoftmaxCrossEntropy };

struct ModelSpec {
  ModelKind kind = ModelKind::kSoftmax;
  int input_dim = 0;
  std::vector<int> hidden;  // hidden layer widths, mlp only (empty otherwise)
  int num_classes = 0;      // softmax/mlp: C ≥ 2; logistic: 2; least_squares: 0
  float l2 = 0.0f;          // L2 penalty on weight matrices, added to loss and gradient

  // Checks the fields against each other (dims > 0, hidden only for mlp, ...).
  Status validate() const;

  // Widths of every layer boundary: {input_dim, h_1, ..., h_k, output_dim}.
  std::vector<int> layer_sizes() const;
  int output_dim() const;  // 1 for least_squares and logistic, num_classes otherwise
  OutputLoss output_loss() const;
  std::size_t num_params() const;
  std::size_t num_layers() const { return hidden.size() + 1; }

  // Offset into the flat vector of W_l and b_l (layer l = 0 .. num_layers()-1).
  std::size_t weight_offset(std::size_t layer) const;
  std::size_t bias_offset(std::size_t layer) const;

  // "mlp 784-256-128-10" — for logs and bench tables.
  std::string to_string() const;
};

// Parameter initialisation from a seed: every node that calls this with the same (spec, seed)
// gets the same x_0, bit for bit. Hidden layers (followed by ReLU) use He initialisation
// (He et al. 2015: N(0, 2/fan_in)); the output layer uses N(0, 1/fan_in) for mlp and zeros for the
// convex models (least_squares, logistic, softmax), whose optimum does not depend on a start.
// Biases start at zero. `params` must hold spec.num_params() floats.
void init_params(const ModelSpec& spec, std::uint64_t seed, std::span<float> params);
std::vector<float> init_params(const ModelSpec& spec, std::uint64_t seed);

}  // namespace gossip::sgd

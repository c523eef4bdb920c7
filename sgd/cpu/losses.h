// Per-example output losses of the dense networks (model_spec.h), shared by dense_net.cc and the
// per-level linear kernels (dense_net_kernels.cc). Private to sgd/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sgd/model_spec.h"

namespace gossip::sgd::cpu::losses {

// log(1 + e^z) without overflow.
template <typename T>
T softplus(T z) {
  return std::max(z, T(0)) + std::log1p(std::exp(-std::abs(z)));
}

// Per-example loss of output column j; when `dz` is non-null also writes dLoss_j/dz (unscaled).
template <typename T>
T output_loss(OutputLoss kind, const T* z, int out, std::int32_t label, T target, T* dz) {
  switch (kind) {
    case OutputLoss::kSquared: {
      const T r = z[0] - target;
      if (dz) dz[0] = r;
      return T(0.5) * r * r;
    }
    case OutputLoss::kBinaryLogistic: {
      // label ∈ {0, 1}: loss = softplus(z) − y·z, dloss/dz = σ(z) − y.
      const T y = label ? T(1) : T(0);
      if (dz) dz[0] = T(1) / (T(1) + std::exp(-z[0])) - y;
      return softplus(z[0]) - y * z[0];
    }
    case OutputLoss::kSoftmaxCrossEntropy: {
      T m = z[0];
      for (int k = 1; k < out; ++k) m = std::max(m, z[k]);
      T sum = 0;
      for (int k = 0; k < out; ++k) sum += std::exp(z[k] - m);
      if (dz) {
        const T inv = T(1) / sum;
        for (int k = 0; k < out; ++k) dz[k] = std::exp(z[k] - m) * inv;
        dz[label] -= T(1);
      }
      return std::log(sum) + m - z[label];
    }
  }
  return T(0);
}

template <typename T>
int predicted_class(OutputLoss kind, const T* z, int out) {
  if (kind == OutputLoss::kBinaryLogistic) return z[0] > T(0) ? 1 : 0;
  return static_cast<int>(std::max_element(z, z + out) - z);
}

}  // namespace gossip::sgd::cpu::losses

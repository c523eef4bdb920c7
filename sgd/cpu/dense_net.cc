// Forward and backward passes of the dense networks of model_spec.h on the CPU. The float
// instantiation trains; the double one is what the finite-difference checks run.
//
// Backward pass for z_l = W_l a_{l−1} + b_l, a_l = relu(z_l) (a_L = z_L):
//   dW_l = δ_l a_{l−1}ᵀ (+ l2·W_l),  db_l = δ_l·1,  δ_{l−1} = (W_lᵀ δ_l) ⊙ [a_{l−1} > 0].
// relu'(z) is read off a = relu(z) (a > 0 ⇔ z > 0), so only post-activations are kept.
#include "sgd/cpu/dense_net.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/check.h"
#include "sgd/cpu/dense_net_kernels.h"
#include "sgd/cpu/losses.h"
#include "sgd/cpu/sgemm.h"

namespace gossip::sgd::cpu {
namespace {

template <typename T>
using CMap = Eigen::Map<const Mat<T>>;
template <typename T>
using MMap = Eigen::Map<Mat<T>>;
template <typename T>
using CVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <typename T>
using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;

// c (m×n) = op(a) · op(b), all column-major with leading dimension = rows. Float products go to
// sgemm (sgemm.h: faster than Eigen's on these shapes, and the same bits on every instruction set
// and thread count); double (the finite-difference checks) to Eigen.
template <typename T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, const T* a, const T* b, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm(trans_a, trans_b, m, n, k, a, trans_a ? k : m, b, trans_b ? n : k, c, m,
          Eigen::nbThreads());
    return;
  }
  GOSSIP_CHECK(!(trans_a && trans_b));
  MMap<T> cm(c, m, n);
  const CMap<T> am(a, trans_a ? k : m, trans_a ? m : k);
  const CMap<T> bm(b, trans_b ? n : k, trans_b ? k : n);
  if (!trans_a && !trans_b) cm.noalias() = am * bm;
  if (!trans_a && trans_b) cm.noalias() = am * bm.transpose();
  if (trans_a && !trans_b) cm.noalias() = am.transpose() * bm;
}

// Leaves the output layer's pre-activations (logits) in ws.act.back().
template <typename T>
void forward(const ModelSpec& spec, const T* params, const T* x, int batch, Workspace<T>& ws) {
  const std::vector<int> s = spec.layer_sizes();
  const std::size_t layers = s.size() - 1;
  ws.act.resize(layers);
  ws.delta.resize(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    CMap<T> w(params + spec.weight_offset(l), s[l + 1], s[l]);
    CVecMap<T> b(params + spec.bias_offset(l), s[l + 1]);
    Mat<T>& z = ws.act[l];
    z.resize(s[l + 1], batch);
    gemm<T>(false, false, s[l + 1], batch, s[l], w.data(), l == 0 ? x : ws.act[l - 1].data(),
            z.data());
    if (l + 1 < layers) {
      z = (z.colwise() + b).cwiseMax(T(0));
    } else {
      z.colwise() += b;
    }
  }
}

}  // namespace

template <typename T>
T loss_and_grad(const ModelSpec& spec, const T* params, const T* x, const std::int32_t* labels,
                const T* targets, int batch, T* grad, Workspace<T>& ws) {
  GOSSIP_CHECK_GT(batch, 0);
  forward(spec, params, x, batch, ws);
  const std::vector<int> s = spec.layer_sizes();
  const std::size_t layers = s.size() - 1;
  const int out = s.back();
  const OutputLoss kind = spec.output_loss();

  Mat<T>& d_out = ws.delta[layers - 1];
  d_out.resize(out, batch);
  const Mat<T>& logits = ws.act[layers - 1];
  T loss = 0;
  for (int j = 0; j < batch; ++j) {
    loss += losses::output_loss<T>(kind, logits.data() + static_cast<std::ptrdiff_t>(j) * out, out,
                                   labels ? labels[j] : 0, targets ? targets[j] : T(0),
                                   d_out.data() + static_cast<std::ptrdiff_t>(j) * out);
  }
  const T inv_b = T(1) / T(batch);
  loss *= inv_b;
  d_out *= inv_b;

  for (std::size_t l = layers; l-- > 0;) {
    MMap<T> dw(grad + spec.weight_offset(l), s[l + 1], s[l]);
    VecMap<T> db(grad + spec.bias_offset(l), s[l + 1]);
    const Mat<T>& delta = ws.delta[l];
    gemm<T>(false, true, s[l + 1], s[l], batch, delta.data(), l == 0 ? x : ws.act[l - 1].data(),
            dw.data());
    // db = δ·1, each element summed over the batch in example order. Not delta.rowwise().sum():
    // Eigen peels the destination to its alignment and sums the packet rows in a different order
    // (pairs of pairs) than the peeled ones (one after the other), so the bits of db depended on
    // the address of `grad` modulo 64 (one gossip-sim C-PSGD run on the MLP gave other bits when
    // only its heap layout changed).
    const int rows = s[l + 1];
    std::copy_n(delta.data(), rows, db.data());
    for (int j = 1; j < batch; ++j) {
      const T* dj = delta.data() + static_cast<std::ptrdiff_t>(j) * rows;
      for (int i = 0; i < rows; ++i) db[i] += dj[i];
    }
    if (l > 0) {
      CMap<T> w(params + spec.weight_offset(l), s[l + 1], s[l]);
      Mat<T>& prev = ws.delta[l - 1];
      prev.resize(s[l], batch);
      gemm<T>(true, false, s[l], batch, s[l + 1], w.data(), delta.data(), prev.data());
      prev = (ws.act[l - 1].array() > T(0)).select(prev, T(0));
    }
  }

  if (spec.l2 > 0) {
    const T l2 = static_cast<T>(spec.l2);
    T sq = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      CMap<T> w(params + spec.weight_offset(l), s[l + 1], s[l]);
      MMap<T> dw(grad + spec.weight_offset(l), s[l + 1], s[l]);
      // Fixed-order sums, for the same reason as db above (dense_net_kernels.h).
      if constexpr (std::is_same_v<T, float>) {
        sq = GOSSIP_ISA_PICK(gossip::sgd::cpu, l2_term)(w.data(), w.size(), l2, dw.data(), sq);
      } else {
        const T* wp = w.data();
        T* dwp = dw.data();
        const std::ptrdiff_t size = w.size();
        T lanes[16] = {};
        std::ptrdiff_t k = 0;
        for (; k + 16 <= size; k += 16) {
          for (int q = 0; q < 16; ++q) lanes[q] = std::fma(wp[k + q], wp[k + q], lanes[q]);
        }
        for (; k < size; ++k) lanes[k % 16] = std::fma(wp[k], wp[k], lanes[k % 16]);
        for (const T lane : lanes) sq += lane;
        for (k = 0; k < size; ++k) dwp[k] = std::fma(l2, wp[k], dwp[k]);
      }
    }
    loss += T(0.5) * l2 * sq;
  }
  return loss;
}

template <typename T>
void loss_sum_and_correct(const ModelSpec& spec, const T* params, const T* x,
                          const std::int32_t* labels, const T* targets, int batch, Workspace<T>& ws,
                          double* loss_sum, std::int64_t* correct) {
  forward(spec, params, x, batch, ws);
  const int out = spec.output_dim();
  const OutputLoss kind = spec.output_loss();
  const Mat<T>& logits = ws.act.back();
  double sum = 0;
  std::int64_t right = 0;
  for (int j = 0; j < batch; ++j) {
    const T* z = logits.data() + static_cast<std::ptrdiff_t>(j) * out;
    sum += static_cast<double>(losses::output_loss<T>(kind, z, out, labels ? labels[j] : 0,
                                                      targets ? targets[j] : T(0), nullptr));
    if (kind != OutputLoss::kSquared && losses::predicted_class(kind, z, out) == labels[j]) ++right;
  }
  *loss_sum = sum;
  *correct = right;
}

bool is_linear(const ModelSpec& spec) {
  return spec.hidden.empty() && spec.output_dim() == 1 &&
         (spec.output_loss() == OutputLoss::kSquared ||
          spec.output_loss() == OutputLoss::kBinaryLogistic);
}

float linear_loss_and_grad(const ModelSpec& spec, const float* params, const float* const* rows,
                           const std::int32_t* labels, const float* targets, int batch,
                           float* grad) {
  GOSSIP_CHECK_GT(batch, 0);
  GOSSIP_CHECK(is_linear(spec));
  return GOSSIP_ISA_PICK(gossip::sgd::cpu, linear_loss_and_grad)(spec, params, rows, labels,
                                                                 targets, batch, grad);
}

template float loss_and_grad<float>(const ModelSpec&, const float*, const float*,
                                    const std::int32_t*, const float*, int, float*,
                                    Workspace<float>&);
template double loss_and_grad<double>(const ModelSpec&, const double*, const double*,
                                      const std::int32_t*, const double*, int, double*,
                                      Workspace<double>&);
template void loss_sum_and_correct<float>(const ModelSpec&, const float*, const float*,
                                          const std::int32_t*, const float*, int, Workspace<float>&,
                                          double*, std::int64_t*);
template void loss_sum_and_correct<double>(const ModelSpec&, const double*, const double*,
                                           const std::int32_t*, const double*, int,
                                           Workspace<double>&, double*, std::int64_t*);

}  // namespace gossip::sgd::cpu

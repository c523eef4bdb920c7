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
#include "sgd/cpu/sgemm.h"
#include "sgd/cpu/simd16.h"

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

// c (m×n) = op(a) · op(b), all column-major with leading dimension = rows. Float products on one
// thread go to our AVX-512 kernel (sgemm.h: faster than Eigen's on these shapes); double (the
// finite-difference checks), multi-threaded runs (Eigen's parallel GEMM) and row counts below
// one register tile go to Eigen.
template <typename T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, const T* a, const T* b, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_is_native() && Eigen::nbThreads() == 1 && m >= 32) {
      sgemm(trans_a, trans_b, m, n, k, a, trans_a ? k : m, b, trans_b ? n : k, c, m);
      return;
    }
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
    loss += output_loss<T>(kind, logits.data() + static_cast<std::ptrdiff_t>(j) * out, out,
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
      // Fixed-order sums, for the same reason as db above: the sum of squares in 16 lanes
      // (element k in lane k % 16, lanes added in order), dw + l2·w as one FMA per element.
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
    sum += static_cast<double>(output_loss<T>(kind, z, out, labels ? labels[j] : 0,
                                              targets ? targets[j] : T(0), nullptr));
    if (kind != OutputLoss::kSquared && predicted_class(kind, z, out) == labels[j]) ++right;
  }
  *loss_sum = sum;
  *correct = right;
}

bool is_linear(const ModelSpec& spec) {
  return spec.hidden.empty() && spec.output_dim() == 1 &&
         (spec.output_loss() == OutputLoss::kSquared ||
          spec.output_loss() == OutputLoss::kBinaryLogistic);
}

namespace {

constexpr int kLanes = 16;  // accumulation lanes of a dot product (part of the rounding)

// z[r] = Σ_k rows[r][k]·w[k] for R rows at once (R independent FMA chains; the rounding of a row
// does not depend on R): lane l accumulates k ≡ l (mod 16) over the full groups, the tail k goes
// into lane k − m16, then lanes are summed pairwise (8, 4, 2, 1).
template <int R>
void dot_rows(const float* const* rows, const float* w, int m, float* z) {
  F16 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = F16::zero();
  const int m_full = m / kLanes * kLanes;
  for (int k0 = 0; k0 < m_full; k0 += kLanes) {
    const F16 wv = F16::load(w + k0);
    for (int r = 0; r < R; ++r) acc[r] = F16::fma(F16::load(rows[r] + k0), wv, acc[r]);
  }
  // The tail and the reduction in registers (F16::fma_head, F16::sum_pairwise: the same
  // operations as the scalar loops they replace, lane for lane).
  for (int r = 0; r < R; ++r) {
    if (m_full < m) acc[r] = F16::fma_head(rows[r] + m_full, w + m_full, m - m_full, acc[r]);
    z[r] = acc[r].sum_pairwise();
  }
}

// The backward dw_k = Σ_j δ_j x_jk (j in row order) for a batch of B rows fixed at compile time:
// the B row pointers and the B broadcast δ_j are set up once per call instead of once per 64-entry
// tile (a pointer load and a memory broadcast per row and tile before). Per entry the operations
// and their order are linear_backward's: acc = δ_0·x_0k, acc = fma(δ_j, x_jk, acc) for j ≥ 1.
template <int B>
void linear_backward_fixed(const float* const* rows, const float* dz, int m, float* dw) {
  constexpr int kGradTile = 64;
  const float* r[B];
  F16 dv[B];
  for (int j = 0; j < B; ++j) {
    r[j] = rows[j];
    dv[j] = F16::broadcast(dz[j]);
  }
  const int m_full = m / kGradTile * kGradTile;
  for (int k0 = 0; k0 < m_full; k0 += kGradTile) {
    F16 a[4];
    for (int v = 0; v < 4; ++v) a[v] = F16::mul(dv[0], F16::load(r[0] + k0 + 16 * v));
    for (int j = 1; j < B; ++j) {
      for (int v = 0; v < 4; ++v) a[v] = F16::fma(dv[j], F16::load(r[j] + k0 + 16 * v), a[v]);
    }
    for (int v = 0; v < 4; ++v) a[v].store(dw + k0 + 16 * v);
  }
  for (int k0 = m_full; k0 < m; k0 += kLanes) {
    const int len = std::min(kLanes, m - k0);
    F16 a = F16::mul(dv[0], F16::load_head(r[0] + k0, len));
    for (int j = 1; j < B; ++j) a = F16::fma(dv[j], F16::load_head(r[j] + k0, len), a);
    a.store_head(dw + k0, len);
  }
}

constexpr int kMaxFixedBatch = 16;

// linear_backward_fixed for batches 1..kMaxFixedBatch; false (nothing done) for larger ones.
template <int B = 1>
bool linear_backward_fixed_dispatch(int batch, const float* const* rows, const float* dz, int m,
                                    float* dw) {
  if constexpr (B > kMaxFixedBatch) {
    return false;
  } else {
    if (batch == B) {
      linear_backward_fixed<B>(rows, dz, m, dw);
      return true;
    }
    return linear_backward_fixed_dispatch<B + 1>(batch, rows, dz, m, dw);
  }
}

}  // namespace

float linear_loss_and_grad(const ModelSpec& spec, const float* params, const float* const* rows,
                           const std::int32_t* labels, const float* targets, int batch,
                           float* grad) {
  GOSSIP_CHECK_GT(batch, 0);
  GOSSIP_CHECK(is_linear(spec));
  const int m = spec.input_dim;
  const OutputLoss kind = spec.output_loss();
  // One layer, one output: the weights are params[0, m), the bias params[m] (ModelSpec's layout;
  // weight_offset/bias_offset would build the layer-size vector on every call).
  const float* w = params;
  const float bias = params[m];
  // Forward: z_j = w·x_j + b; per-example loss and dLoss/dz.
  constexpr int kMaxStack = 256;
  float z_stack[kMaxStack], dz_stack[kMaxStack];
  std::vector<float> heap;
  float* z = z_stack;
  float* dz = dz_stack;
  if (batch > kMaxStack) {
    heap.resize(2 * static_cast<std::size_t>(batch));
    z = heap.data();
    dz = heap.data() + batch;
  }
  int j = 0;
  for (; j + 8 <= batch; j += 8) dot_rows<8>(rows + j, w, m, z + j);
  for (; j + 4 <= batch; j += 4) dot_rows<4>(rows + j, w, m, z + j);
  for (; j < batch; ++j) dot_rows<1>(rows + j, w, m, z + j);
  float loss = 0;
  for (j = 0; j < batch; ++j) {
    const float zj = z[j] + bias;
    loss += output_loss<float>(kind, &zj, 1, labels ? labels[j] : 0, targets ? targets[j] : 0.0f,
                               &dz[j]);
  }
  const float inv_b = 1.0f / static_cast<float>(batch);
  loss *= inv_b;
  for (j = 0; j < batch; ++j) dz[j] *= inv_b;

  // Backward: dw_k = Σ_j δ_j x_jk in row order, db = Σ_j δ_j.
  float* dw = grad;
  constexpr int kGradTile = 64;  // gradient entries held in four registers while the rows stream by
  const bool fixed = linear_backward_fixed_dispatch(batch, rows, dz, m, dw);
  const int m_full = fixed ? 0 : m / kGradTile * kGradTile;
  for (int k0 = 0; k0 < m_full; k0 += kGradTile) {
    const float* x0 = rows[0] + k0;
    F16 a0 = F16::mul(dz[0], F16::load(x0));
    F16 a1 = F16::mul(dz[0], F16::load(x0 + 16));
    F16 a2 = F16::mul(dz[0], F16::load(x0 + 32));
    F16 a3 = F16::mul(dz[0], F16::load(x0 + 48));
    for (j = 1; j < batch; ++j) {
      const float dj = dz[j];
      const float* x = rows[j] + k0;
      a0 = F16::fma(dj, F16::load(x), a0);
      a1 = F16::fma(dj, F16::load(x + 16), a1);
      a2 = F16::fma(dj, F16::load(x + 32), a2);
      a3 = F16::fma(dj, F16::load(x + 48), a3);
    }
    a0.store(dw + k0);
    a1.store(dw + k0 + 16);
    a2.store(dw + k0 + 32);
    a3.store(dw + k0 + 48);
  }
  // The entries past the last full tile, 16 (then the rest, masked) at a time: the same
  // operations per entry as above.
  for (int k0 = fixed ? m : m_full; k0 < m; k0 += kLanes) {
    const int len = std::min(kLanes, m - k0);
    F16 a = F16::mul(dz[0], F16::load_head(rows[0] + k0, len));
    for (j = 1; j < batch; ++j) a = F16::fma(dz[j], F16::load_head(rows[j] + k0, len), a);
    a.store_head(dw + k0, len);
  }
  float db = dz[0];
  for (j = 1; j < batch; ++j) db += dz[j];
  grad[m] = db;

  if (spec.l2 > 0) {
    const float l2 = spec.l2;
    float sq;
    dot_rows<1>(&w, w, m, &sq);
    for (int k = 0; k < m; ++k) dw[k] = std::fma(l2, w[k], dw[k]);
    loss += 0.5f * l2 * sq;
  }
  return loss;
}

template float loss_and_grad<float>(const ModelSpec&, const float*, const float*,
                                    const std::int32_t*, const float*, int, float*,
                                    Workspace<float>&);
template double loss_and_grad<double>(const ModelSpec&, const double*, const double*,
                                      const std::int32_t*, const double*, int, double*,
                                      Workspace<double>&);
template void loss_sum_and_correct<float>(const ModelSpec&, const float*, const float*,
                                          const std::int32_t*, const float*, int,
                                          Workspace<float>&, double*, std::int64_t*);
template void loss_sum_and_correct<double>(const ModelSpec&, const double*, const double*,
                                           const std::int32_t*, const double*, int,
                                           Workspace<double>&, double*, std::int64_t*);

}  // namespace gossip::sgd::cpu

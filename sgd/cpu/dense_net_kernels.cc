// The per-level kernels of dense_net (dense_net_kernels.h), compiled once per instruction-set
// level (common/isa_kernel_begin.h): the linear models' loss and gradient, and the l2 term.
#include "sgd/cpu/dense_net_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/isa_kernel_begin.h"
#include "sgd/cpu/losses.h"
#include "sgd/cpu/simd16.h"

namespace gossip::sgd::cpu::GOSSIP_ISA_NS {

namespace {

using F16 = F16ForLevel<GOSSIP_ISA_LEVEL>;

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
    loss += losses::output_loss<float>(kind, &zj, 1, labels ? labels[j] : 0,
                                       targets ? targets[j] : 0.0f, &dz[j]);
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

float l2_term(const float* w, std::ptrdiff_t size, float l2, float* dw, float sq) {
  // The sum of squares in 16 lanes (element k in lane k % 16, lanes added in order), dw + l2·w as
  // one FMA per element.
  float lanes[16] = {};
  std::ptrdiff_t k = 0;
  for (; k + 16 <= size; k += 16) {
    for (int q = 0; q < 16; ++q) lanes[q] = std::fma(w[k + q], w[k + q], lanes[q]);
  }
  for (; k < size; ++k) lanes[k % 16] = std::fma(w[k], w[k], lanes[k % 16]);
  for (const float lane : lanes) sq += lane;
  for (k = 0; k < size; ++k) dw[k] = std::fma(l2, w[k], dw[k]);
  return sq;
}

}  // namespace gossip::sgd::cpu::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

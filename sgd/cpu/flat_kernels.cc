// The cpu backend's flat kernels (flat_kernels.h), compiled once per instruction-set level
// (common/isa_kernel_begin.h): plain loops with std::fma, which GCC vectorises for the level, and
// AdamW on simd16.h's F16 (GCC does not vectorise std::sqrt).
#include "sgd/cpu/flat_kernels.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "common/isa_kernel_begin.h"
#include "sgd/cpu/simd16.h"

namespace gossip::sgd::cpu::GOSSIP_ISA_NS {
namespace {

// One pass over [begin, end) with K ≤ 4 terms held in registers:
//   kAccumulate: acc = out[k], then acc = fma(w_j, x_j[k], acc) for every term;
//   otherwise:   acc = w_0·x_0[k], then fma for terms 1..K−1;
//   kUpdate:     out[k] = fma(−γ, u[k], acc), else out[k] = acc.
// Chaining passes of four reproduces the rounding of one long left-to-right fma chain exactly (acc
// is a float either way), while each pass is a pure stream at memcpy-like bandwidth.
template <int K, bool kAccumulate, bool kUpdate>
void mix_pass(float* out, const MixTerm* terms, float neg_gamma, const float* update,
              std::size_t begin, std::size_t end) {
  const float* x[4] = {};
  float w[4] = {};
  for (int j = 0; j < K; ++j) {
    x[j] = terms[j].x;
    w[j] = terms[j].weight;
  }
  for (std::size_t k = begin; k < end; ++k) {
    float acc;
    if constexpr (kAccumulate) {
      acc = std::fma(w[0], x[0][k], out[k]);
    } else {
      acc = w[0] * x[0][k];
    }
    if constexpr (K > 1) acc = std::fma(w[1], x[1][k], acc);
    if constexpr (K > 2) acc = std::fma(w[2], x[2][k], acc);
    if constexpr (K > 3) acc = std::fma(w[3], x[3][k], acc);
    if constexpr (kUpdate) acc = std::fma(neg_gamma, update[k], acc);
    out[k] = acc;
  }
}

template <bool kAccumulate, bool kUpdate>
void mix_pass(float* out, std::span<const MixTerm> terms, float neg_gamma, const float* update,
              std::size_t begin, std::size_t end) {
  switch (terms.size()) {
    case 1:
      return mix_pass<1, kAccumulate, kUpdate>(out, terms.data(), neg_gamma, update, begin, end);
    case 2:
      return mix_pass<2, kAccumulate, kUpdate>(out, terms.data(), neg_gamma, update, begin, end);
    case 3:
      return mix_pass<3, kAccumulate, kUpdate>(out, terms.data(), neg_gamma, update, begin, end);
    default:
      return mix_pass<4, kAccumulate, kUpdate>(out, terms.data(), neg_gamma, update, begin, end);
  }
}

}  // namespace

// One contiguous range [begin, end) of the mixing sum: passes of up to four terms. `out` may alias
// a term only when there are at most four (one pass reads every input of an element before it
// writes it); mix() copies an aliased term aside otherwise.
void mix_range(float* out, const MixTerm* term_data, std::size_t num_terms, float gamma,
               const float* update, std::size_t begin, std::size_t end) {
  const std::span<const MixTerm> terms(term_data, num_terms);
  const float neg_gamma = -gamma;
  for (std::size_t first = 0; first < terms.size(); first += 4) {
    const auto group = terms.subspan(first, std::min<std::size_t>(4, terms.size() - first));
    const bool last = first + group.size() == terms.size();
    const bool upd = last && update != nullptr;
    if (first == 0) {
      upd ? mix_pass<false, true>(out, group, neg_gamma, update, begin, end)
          : mix_pass<false, false>(out, group, neg_gamma, update, begin, end);
    } else {
      upd ? mix_pass<true, true>(out, group, neg_gamma, update, begin, end)
          : mix_pass<true, false>(out, group, neg_gamma, update, begin, end);
    }
  }
}

void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n,
                   float momentum, float weight_decay, bool nesterov) {
  if (momentum == 0.0f) {
    for (std::size_t k = 0; k < n; ++k) u[k] = std::fma(weight_decay, x[k], g[k]);
    return;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const float gk = std::fma(weight_decay, x[k], g[k]);
    const float v = std::fma(momentum, velocity[k], gk);
    velocity[k] = v;
    u[k] = nesterov ? std::fma(momentum, v, gk) : v;
  }
}

// One float with F16's operations (simd16.h), for the tails of the F16 loops.
struct F1 {
  float v;
  static F1 load(const float* p) { return {*p}; }
  void store(float* p) const { *p = v; }
  static F1 broadcast(float w) { return {w}; }
  static F1 mul(F1 a, F1 b) { return {a.v * b.v}; }
  static F1 mul(float w, F1 a) { return {w * a.v}; }
  static F1 fma(float w, F1 a, F1 c) { return {std::fma(w, a.v, c.v)}; }
  static F1 fma(F1 a, F1 b, F1 c) { return {std::fma(a.v, b.v, c.v)}; }
  static F1 div(F1 a, F1 b) { return {a.v / b.v}; }
  static F1 sqrt(F1 a) { return {std::sqrt(a.v)}; }
};

// Backend::adamw_direction's operations on one F16 (16 elements) or one F1: written once for both
// widths, so the tail rounds like the body. (The square root is explicit: GCC keeps std::sqrt
// scalar for errno's sake.)
template <typename V>
inline void adamw_at(float* u, float* m, float* v, const float* x, const float* g,
                     const AdamWCoefficients& c) {
  const V gk = V::load(g);
  const V mk = V::fma(c.beta1, V::load(m), V::mul(c.one_minus_beta1, gk));
  const V vk = V::fma(c.beta2, V::load(v), V::mul(V::mul(c.one_minus_beta2, gk), gk));
  mk.store(m);
  vk.store(v);
  const V den = V::fma(V::sqrt(vk), V::broadcast(c.inv_sqrt_bias2), V::broadcast(c.eps));
  V::fma(c.weight_decay, V::load(x), V::div(V::mul(c.inv_bias1, mk), den)).store(u);
}

void adamw_direction(float* u, float* m, float* v, const float* x, const float* g, std::size_t n,
                     const AdamWCoefficients& c) {
  using F16 = F16ForLevel<GOSSIP_ISA_LEVEL>;
  std::size_t k = 0;
  for (; k + 16 <= n; k += 16) adamw_at<F16>(u + k, m + k, v + k, x + k, g + k, c);
  for (; k < n; ++k) adamw_at<F1>(u + k, m + k, v + k, x + k, g + k, c);
}

// outer_optimizer.h's recurrences: momentum 0 is a ← a − lr·d (lr = 1: a − d exactly).
void outer_step(float* anchor, const float* d, float* m, std::size_t n, float lr, float momentum,
                bool nesterov) {
  const float neg_lr = -lr;
  if (momentum == 0.0f) {
    for (std::size_t k = 0; k < n; ++k) anchor[k] = std::fma(neg_lr, d[k], anchor[k]);
    return;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const float mk = std::fma(momentum, m[k], d[k]);
    m[k] = mk;
    const float step = nesterov ? std::fma(momentum, mk, d[k]) : mk;
    anchor[k] = std::fma(neg_lr, step, anchor[k]);
  }
}

}  // namespace gossip::sgd::cpu::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

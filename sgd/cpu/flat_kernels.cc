// The cpu backend's flat kernels (flat_kernels.h), compiled once per instruction-set level
// (common/isa_kernel_begin.h): plain loops with std::fma, which GCC vectorises for the level.
#include "sgd/cpu/flat_kernels.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "common/isa_kernel_begin.h"

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

}  // namespace gossip::sgd::cpu::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

// sim_bench's reference loops over F16 (copy, batch-row reads, peak FMA rate), compiled once per
// instruction-set level (common/isa_kernel_begin.h) like the kernels they are held against.
#include "bench/sim_bench_kernels.h"

#include <cstddef>

#include "common/isa_kernel_begin.h"
#include "sgd/cpu/simd16.h"

namespace gossip::bench::GOSSIP_ISA_NS {

using F16 = sgd::cpu::F16ForLevel<GOSSIP_ISA_LEVEL>;

void copy16(float* dst, const float* src, std::ptrdiff_t n) {
  std::ptrdiff_t k = 0;
  for (; k + 16 <= n; k += 16) F16::load(src + k).store(dst + k);
  for (; k < n; ++k) dst[k] = src[k];
}

void read_rows(const float* const* x, int g, int m, float* sink) {
  constexpr int kGroup = 8;
  const F16 w = F16::broadcast(0.5f);
  F16 acc[kGroup];
  for (int j = 0; j < g; ++j) acc[j] = F16::zero();
  int k = 0;
  for (; k + 16 <= m; k += 16) {
    for (int j = 0; j < g; ++j) acc[j] = F16::fma(F16::load(x[j] + k), w, acc[j]);
  }
  for (int j = 0; j < g; ++j) {
    if (k < m) acc[j] = F16::fma_head(x[j] + k, x[j] + k, m - k, acc[j]);
    acc[j].store(sink);  // keeps the reads: the store depends on every one of them
  }
}

float fma16_chains(int chains, int steps) {
  constexpr int kMaxChains = 12;
  F16 acc[kMaxChains];
  for (int c = 0; c < kMaxChains; ++c) acc[c] = F16::broadcast(static_cast<float>(c));
  const F16 a = F16::broadcast(0.999f), b = F16::broadcast(1e-3f);
  for (int s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kMaxChains; ++c) acc[c] = F16::fma(acc[c], a, b);
  }
  float out[16];
  acc[chains - 1].store(out);
  return out[0];
}

}  // namespace gossip::bench::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

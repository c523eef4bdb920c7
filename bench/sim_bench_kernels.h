// sim_bench's per-level reference loops (sim_bench_kernels.cc).
#pragma once

#include <cstddef>

#include "common/isa.h"

namespace gossip::bench {

// copy16: dst = src with 16-float loads and stores. read_rows: g ≤ 8 rows of m floats read side by
// side with one FMA per 16 floats (the forward's access pattern), results stored to sink (16
// floats). fma16_chains: 12 independent chains of `steps` 16-float FMAs in registers; returns a
// lane of chain `chains` − 1 (1 ≤ chains ≤ 12) so the work is kept.
#define GOSSIP_SIM_BENCH_DECLARE(ns)                                \
  namespace ns {                                                    \
  void copy16(float* dst, const float* src, std::ptrdiff_t n);      \
  void read_rows(const float* const* x, int g, int m, float* sink); \
  float fma16_chains(int chains, int steps);                        \
  }
GOSSIP_ISA_DECLARE(GOSSIP_SIM_BENCH_DECLARE)
#undef GOSSIP_SIM_BENCH_DECLARE

}  // namespace gossip::bench

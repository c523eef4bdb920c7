// The cpu backend's flat kernels, one copy per instruction-set level (common/isa.h). Private to
// sgd/: callers use mix(), sgd_direction() and adamw_direction() of cpu_backend.h and outer_step()
// of outer_optimizer.h, which pick the level.
#pragma once

#include <cstddef>

#include "common/isa.h"
#include "sgd/backend.h"

namespace gossip::sgd::cpu {

// mix_range: elements [begin, end) of cpu::mix (one thread; `out` may alias a term only when there
// are at most four). sgd_direction: cpu::sgd_direction (velocity non-null when momentum ≠ 0).
// adamw_direction: Backend::adamw_direction. outer_step: sgd::outer_step (outer_optimizer.h) with
// its scalars in float (momentum null when 0).
#define GOSSIP_FLAT_KERNELS_DECLARE(ns)                                                        \
  namespace ns {                                                                               \
  void mix_range(float* out, const MixTerm* terms, std::size_t num_terms, float gamma,         \
                 const float* update, std::size_t begin, std::size_t end);                     \
  void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n, \
                     float momentum, float weight_decay, bool nesterov);                       \
  void adamw_direction(float* u, float* m, float* v, const float* x, const float* g,           \
                       std::size_t n, const AdamWCoefficients& c);                             \
  void outer_step(float* anchor, const float* d, float* m, std::size_t n, float lr,            \
                  float momentum, bool nesterov);                                              \
  }
GOSSIP_ISA_DECLARE(GOSSIP_FLAT_KERNELS_DECLARE)
#undef GOSSIP_FLAT_KERNELS_DECLARE

}  // namespace gossip::sgd::cpu

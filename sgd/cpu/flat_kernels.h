// The cpu backend's flat kernels, one copy per instruction-set level (common/isa.h). Private to
// sgd/cpu: callers use mix() and sgd_direction() of cpu_backend.h, which pick the level.
#pragma once

#include <cstddef>

#include "common/isa.h"
#include "sgd/backend.h"

namespace gossip::sgd::cpu {

// mix_range: elements [begin, end) of cpu::mix (one thread; `out` may alias a term only when there
// are at most four). sgd_direction: cpu::sgd_direction (velocity non-null when momentum ≠ 0).
#define GOSSIP_FLAT_KERNELS_DECLARE(ns)                                                        \
  namespace ns {                                                                               \
  void mix_range(float* out, const MixTerm* terms, std::size_t num_terms, float gamma,         \
                 const float* update, std::size_t begin, std::size_t end);                     \
  void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n, \
                     float momentum, float weight_decay, bool nesterov);                       \
  }
GOSSIP_ISA_DECLARE(GOSSIP_FLAT_KERNELS_DECLARE)
#undef GOSSIP_FLAT_KERNELS_DECLARE

}  // namespace gossip::sgd::cpu

// The per-level kernels of dense_net.cc, one copy per instruction-set level (common/isa.h).
// Private to sgd/cpu; dense_net.h states what they compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/isa.h"
#include "sgd/model_spec.h"

namespace gossip::sgd::cpu {

// linear_loss_and_grad (dense_net.h) without its argument checks. l2_term: Σ w_k² in 16 lanes
// (element k in lane k % 16, FMAs), the lanes then added to `sq` in order (returned), and
// dw_k = fma(l2, w_k, dw_k).
#define GOSSIP_DENSE_NET_DECLARE(ns)                                                               \
  namespace ns {                                                                                   \
  float linear_loss_and_grad(const ModelSpec& spec, const float* params, const float* const* rows, \
                             const std::int32_t* labels, const float* targets, int batch,          \
                             float* grad);                                                         \
  float l2_term(const float* w, std::ptrdiff_t size, float l2, float* dw, float sq);               \
  }
GOSSIP_ISA_DECLARE(GOSSIP_DENSE_NET_DECLARE)
#undef GOSSIP_DENSE_NET_DECLARE

}  // namespace gossip::sgd::cpu

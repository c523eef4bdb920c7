// The mixing kernels of node_state.h, one copy per instruction-set level (common/isa.h); mix() and
// mix_node() of node_state.h pick the level. Private to sim/.
#pragma once

#include "common/isa.h"
#include "sim/node_state.h"

namespace gossip::sim {

#define GOSSIP_NODE_STATE_DECLARE(ns)                                                             \
  namespace ns {                                                                                  \
  void mix(const MixingPlan& plan, const StateMatrix& x, float gamma, const StateMatrix* update,  \
           StateMatrix& out);                                                                     \
  void mix_node(const MixingPlan& plan, const StateMatrix& x, int i, float gamma, const float* u, \
                float* out_col);                                                                  \
  }
GOSSIP_ISA_DECLARE(GOSSIP_NODE_STATE_DECLARE)
#undef GOSSIP_NODE_STATE_DECLARE

}  // namespace gossip::sim

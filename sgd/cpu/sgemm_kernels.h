// The per-level single-threaded GEMM behind sgemm() (sgemm.h), one copy per instruction-set level
// (common/isa.h). Private to sgd/cpu.
#pragma once

#include "common/isa.h"

namespace gossip::sgd::cpu {

// The blocking of k, part of the rounding contract (sgemm.h): every level uses it.
constexpr int kSgemmKc = 384;

#define GOSSIP_SGEMM_DECLARE(ns)                                                              \
  namespace ns {                                                                              \
  void sgemm_serial(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, \
                    const float* b, int ldb, float* c, int ldc);                              \
  }
GOSSIP_ISA_DECLARE(GOSSIP_SGEMM_DECLARE)
#undef GOSSIP_SGEMM_DECLARE

}  // namespace gossip::sgd::cpu

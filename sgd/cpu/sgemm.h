// Single-precision GEMM for the cpu backend's dense networks: C = op(A) · op(B), column-major.
//
// Why not Eigen's product alone: on the one-thread training step (MLP 784-256-128-10, batch 128)
// Eigen 3.4's AVX-512 kernel (48×4 register tile) left the step at 0.77× PyTorch's. This is the
// classic Goto/BLIS layout — B packed in KC×NR micro-panels that stay in L1, A in MR×KC panels
// that stay in L2, a 32×12 register tile of 24 accumulators (two fused multiply-adds per
// broadcast) — written with AVX-512 intrinsics. Where the build has no AVX-512 (GOSSIP_NATIVE off,
// other CPUs) the same call goes to Eigen.
//
// Rounding: every C entry is one chain of fused multiply-adds over k in increasing order, in
// blocks of kKc (the partial sum of a block is added to C with one more rounding). The result is
// deterministic and independent of m, n, alignment and which tile an entry falls in; it differs
// from Eigen's (another blocking) by float rounding only.
#pragma once

namespace gossip::sgd::cpu {

// C (m×n, leading dimension ldc) = op(A) · op(B), where op(A) is m×k (A m×k with lda, or its
// transpose: A k×m) and op(B) is k×n. C must not alias A or B. k = 0 gives C = 0.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
           const float* b, int ldb, float* c, int ldc);

// Whether sgemm runs the AVX-512 kernel (false: it forwards to Eigen).
bool sgemm_is_native();

}  // namespace gossip::sgd::cpu

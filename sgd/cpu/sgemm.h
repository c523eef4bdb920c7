// Single-precision GEMM for the cpu backend's dense networks: C = op(A) · op(B), column-major.
//
// Why not Eigen's product: on the one-thread training step (MLP 784-256-128-10, batch 128) Eigen
// 3.4's AVX-512 kernel (48×4 register tile) left the step at 0.77× PyTorch's, and its rounding
// depends on the instruction set and the thread count. This is the classic Goto/BLIS layout — B
// packed in KC×NR micro-panels that stay in L1, A in MR×KC panels that stay in L2, a register tile
// of accumulators — written once over the F16 vector type and compiled per instruction-set level
// (common/isa.h: AVX-512 32×12, AVX2 + FMA 16×6, portable C++ 16×4).
//
// Rounding: every C entry is one chain of fused multiply-adds over k in increasing order, from
// zero, in blocks of 384 (the partial sum of a block is added to C with one more rounding):
//   c = chain(p in [0, 384)); c = c + chain(p in [384, 768)); ...
// The result is the same bits on every level, for every thread count, and independent of m, n,
// alignment and which tile an entry falls in (tests/sgd/sgemm_test.cc holds every level to a
// scalar loop of exactly these operations).
#pragma once

namespace gossip::sgd::cpu {

// C (m×n, leading dimension ldc) = op(A) · op(B), where op(A) is m×k (A m×k with lda, or its
// transpose: A k×m) and op(B) is k×n. C must not alias A or B. k = 0 gives C = 0. `threads` > 1
// splits C across that many OpenMP threads when the product is large enough (same bits).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float* c, int ldc, int threads = 1);

}  // namespace gossip::sgd::cpu

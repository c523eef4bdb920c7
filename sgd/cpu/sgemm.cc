// sgemm (sgemm.h): the per-level kernel (sgemm_kernels.cc) for the active instruction-set level,
// on one thread or on column (or row) ranges of C, one per OpenMP thread.
#include "sgd/cpu/sgemm.h"

#include <algorithm>
#include <cstddef>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "sgd/cpu/sgemm_kernels.h"

namespace gossip::sgd::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kParallelMinFlops = 1 << 20;

}  // namespace

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float* c, int ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int j = 0; j < n; ++j) std::fill_n(c + static_cast<std::ptrdiff_t>(j) * ldc, m, 0.0f);
    return;
  }
  const auto serial = GOSSIP_ISA_PICK(gossip::sgd::cpu, sgemm_serial);
  const double flops = static_cast<double>(m) * n * k;
  if (threads <= 1 || flops < kParallelMinFlops) {
    serial(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  // Every entry is computed the same way wherever it falls (sgemm.h), so any split gives the same
  // bits: split the longer side of C, rows on 16-float boundaries (no cache line of C shared).
  const bool split_rows = m > n;
  const int extent = split_rows ? m : n;
  const int unit = split_rows ? 16 : 1;
  const int units = (extent + unit - 1) / unit;
  threads = std::min(threads, units);
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    const int begin = std::min(extent, static_cast<int>(static_cast<long>(units) * t / nt) * unit);
    const int end =
        std::min(extent, static_cast<int>(static_cast<long>(units) * (t + 1) / nt) * unit);
    if (begin < end) {
      if (split_rows) {
        const float* a_part = trans_a ? a + static_cast<std::ptrdiff_t>(begin) * lda : a + begin;
        serial(trans_a, trans_b, end - begin, n, k, a_part, lda, b, ldb, c + begin, ldc);
      } else {
        const float* b_part = trans_b ? b + begin : b + static_cast<std::ptrdiff_t>(begin) * ldb;
        serial(trans_a, trans_b, m, end - begin, k, a, lda, b_part, ldb,
               c + static_cast<std::ptrdiff_t>(begin) * ldc, ldc);
      }
    }
  }
}

}  // namespace gossip::sgd::cpu

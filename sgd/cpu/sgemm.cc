// The Goto/BLIS loop nest (see sgemm.h):
//   for each KC block of k:   pack op(B)[pc, :] into NR-column micro-panels     (L3 / L2)
//     for each MC block of m: pack op(A)[ic, pc] into MR-row micro-panels       (L2)
//       for each NR panel, each MR panel: the 32×12 kernel over KC              (registers, L1)
// Packing pads partial panels with zeros, so the kernel always runs the full tile; a partial tile
// is written through a small buffer.
#include "sgd/cpu/sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <Eigen/Core>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace gossip::sgd::cpu {
namespace {

[[maybe_unused]] void sgemm_eigen(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                 const float* b, int ldb, float* c, int ldc) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  using CMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> cm(c, m, n, Eigen::OuterStride<>(ldc));
  const CMap am(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  const CMap bm(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  if (!trans_a && !trans_b) cm.noalias() = am * bm;
  if (!trans_a && trans_b) cm.noalias() = am * bm.transpose();
  if (trans_a && !trans_b) cm.noalias() = am.transpose() * bm;
  if (trans_a && trans_b) cm.noalias() = am.transpose() * bm.transpose();
}

#if defined(__AVX512F__)

constexpr int kMr = 32;   // rows of the register tile: two 16-float vectors
constexpr int kNr = 12;   // columns: 2 × 12 = 24 accumulators of the 32 zmm registers
constexpr int kKc = 384;  // k per block: a B micro-panel is 18 KiB (L1)
constexpr int kMc = 128;  // rows per A block: 192 KiB (L2)

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

// Per-thread packing buffers, grown on demand and kept (no allocation per product).
struct PackBuffers {
  std::unique_ptr<float, AlignedFree> a, b;
  std::size_t a_size = 0, b_size = 0;

  static float* grow(std::unique_ptr<float, AlignedFree>& p, std::size_t& size, std::size_t need) {
    if (need > size) {
      const std::size_t bytes = (need * sizeof(float) + 63) / 64 * 64;
      p.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!p) throw std::bad_alloc();
      size = need;
    }
    return p.get();
  }
};

// op(A)(i, p) and op(B)(p, j) for the column-major operands.
inline float at_a(bool trans, const float* a, int lda, int i, int p) {
  return trans ? a[p + static_cast<std::ptrdiff_t>(i) * lda] : a[i + static_cast<std::ptrdiff_t>(p) * lda];
}
inline float at_b(bool trans, const float* b, int ldb, int p, int j) {
  return trans ? b[j + static_cast<std::ptrdiff_t>(p) * ldb] : b[p + static_cast<std::ptrdiff_t>(j) * ldb];
}

// MR-row panels of op(A)[i0 : i0+mc, p0 : p0+kc]: panel r holds, for each p, kMr consecutive rows.
void pack_a(bool trans, const float* a, int lda, int i0, int mc, int p0, int kc, float* out) {
  for (int r = 0; r < mc; r += kMr) {
    const int rows = std::min(kMr, mc - r);
    float* panel = out + static_cast<std::ptrdiff_t>(r) * kc;
    if (!trans && rows == kMr) {
      for (int p = 0; p < kc; ++p) {
        const float* src = a + (i0 + r) + static_cast<std::ptrdiff_t>(p0 + p) * lda;
        std::memcpy(panel + p * kMr, src, kMr * sizeof(float));
      }
      continue;
    }
    for (int p = 0; p < kc; ++p) {
      float* dst = panel + p * kMr;
      for (int i = 0; i < rows; ++i) dst[i] = at_a(trans, a, lda, i0 + r + i, p0 + p);
      for (int i = rows; i < kMr; ++i) dst[i] = 0.0f;
    }
  }
}

// NR-column panels of op(B)[p0 : p0+kc, 0 : n]: panel q holds, for each p, kNr consecutive columns.
void pack_b(bool trans, const float* b, int ldb, int p0, int kc, int n, float* out) {
  for (int q = 0; q < n; q += kNr) {
    const int cols = std::min(kNr, n - q);
    float* panel = out + static_cast<std::ptrdiff_t>(q) * kc;
    if (trans && cols == kNr) {
      for (int p = 0; p < kc; ++p) {
        std::memcpy(panel + p * kNr, b + q + static_cast<std::ptrdiff_t>(p0 + p) * ldb,
                    kNr * sizeof(float));
      }
      continue;
    }
    for (int p = 0; p < kc; ++p) {
      float* dst = panel + p * kNr;
      for (int j = 0; j < cols; ++j) dst[j] = at_b(trans, b, ldb, p0 + p, q + j);
      for (int j = cols; j < kNr; ++j) dst[j] = 0.0f;
    }
  }
}

// acc = Σ_p A[:, p] B[p, :] over one packed A panel and one packed B panel; then
// C[0:rows, 0:cols] = acc (first k block) or C += acc.
void kernel(int kc, const float* ap, const float* bp, float* c, int ldc, int rows, int cols,
            bool accumulate) {
  __m512 acc[2][kNr];
  for (int j = 0; j < kNr; ++j) acc[0][j] = acc[1][j] = _mm512_setzero_ps();
  for (int p = 0; p < kc; ++p) {
    const __m512 a0 = _mm512_load_ps(ap);
    const __m512 a1 = _mm512_load_ps(ap + 16);
#pragma GCC unroll 12
    for (int j = 0; j < kNr; ++j) {
      const __m512 bj = _mm512_set1_ps(bp[j]);
      acc[0][j] = _mm512_fmadd_ps(a0, bj, acc[0][j]);
      acc[1][j] = _mm512_fmadd_ps(a1, bj, acc[1][j]);
    }
    ap += kMr;
    bp += kNr;
  }
  if (rows == kMr && cols == kNr) {
    for (int j = 0; j < kNr; ++j) {
      float* cj = c + static_cast<std::ptrdiff_t>(j) * ldc;
      if (accumulate) {
        _mm512_storeu_ps(cj, _mm512_add_ps(_mm512_loadu_ps(cj), acc[0][j]));
        _mm512_storeu_ps(cj + 16, _mm512_add_ps(_mm512_loadu_ps(cj + 16), acc[1][j]));
      } else {
        _mm512_storeu_ps(cj, acc[0][j]);
        _mm512_storeu_ps(cj + 16, acc[1][j]);
      }
    }
    return;
  }
  alignas(64) float tile[kNr][kMr];
  for (int j = 0; j < kNr; ++j) {
    _mm512_store_ps(tile[j], acc[0][j]);
    _mm512_store_ps(tile[j] + 16, acc[1][j]);
  }
  for (int j = 0; j < cols; ++j) {
    float* cj = c + static_cast<std::ptrdiff_t>(j) * ldc;
    for (int i = 0; i < rows; ++i) cj[i] = accumulate ? cj[i] + tile[j][i] : tile[j][i];
  }
}

void sgemm_avx512(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float* c, int ldc) {
  thread_local PackBuffers buffers;
  const int kc_max = std::min(k, kKc);
  const int n_padded = (n + kNr - 1) / kNr * kNr;
  float* bpack = PackBuffers::grow(buffers.b, buffers.b_size,
                                   static_cast<std::size_t>(kc_max) * n_padded);
  float* apack = PackBuffers::grow(buffers.a, buffers.a_size,
                                   static_cast<std::size_t>(kc_max) * kMc);
  for (int p0 = 0; p0 < k; p0 += kKc) {
    const int kc = std::min(kKc, k - p0);
    const bool accumulate = p0 > 0;
    pack_b(trans_b, b, ldb, p0, kc, n, bpack);
    for (int i0 = 0; i0 < m; i0 += kMc) {
      const int mc = std::min(kMc, m - i0);
      pack_a(trans_a, a, lda, i0, mc, p0, kc, apack);
      for (int q = 0; q < n; q += kNr) {
        const float* bp = bpack + static_cast<std::ptrdiff_t>(q) * kc;
        for (int r = 0; r < mc; r += kMr) {
          kernel(kc, apack + static_cast<std::ptrdiff_t>(r) * kc, bp,
                 c + (i0 + r) + static_cast<std::ptrdiff_t>(q) * ldc, ldc, std::min(kMr, mc - r),
                 std::min(kNr, n - q), accumulate);
        }
      }
    }
  }
}

#endif  // __AVX512F__

}  // namespace

bool sgemm_is_native() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
           const float* b, int ldb, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int j = 0; j < n; ++j) std::fill_n(c + static_cast<std::ptrdiff_t>(j) * ldc, m, 0.0f);
    return;
  }
#if defined(__AVX512F__)
  sgemm_avx512(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
#else
  sgemm_eigen(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
#endif
}

}  // namespace gossip::sgd::cpu

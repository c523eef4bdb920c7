// The Goto/BLIS loop nest of sgemm (see sgemm.h), compiled once per instruction-set level
// (common/isa_kernel_begin.h):
//   for each kKc block of k:   pack op(B)[pc, :] into NR-column micro-panels     (L3 / L2)
//     for each MC block of m: pack op(A)[ic, pc] into MR-row micro-panels       (L2)
//       for each NR panel, each MR panel: the MR×NR kernel over the block       (registers, L1)
// Packing pads partial panels with zeros, so the kernel always runs the full tile; a partial tile
// is written through a small buffer. The register tile is the level's (AVX-512 32×12: 24 of the
// 32 zmm registers; AVX2 16×6: 12 of the 16 ymm; portable 16×4), the blocking of k is every
// level's (kKc = 384), so each entry is the same chain of operations on every level.
#include "sgd/cpu/sgemm_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "common/isa_kernel_begin.h"
#include "sgd/cpu/simd16.h"

namespace gossip::sgd::cpu::GOSSIP_ISA_NS {
namespace {

using F16 = F16ForLevel<GOSSIP_ISA_LEVEL>;

#if GOSSIP_ISA_LEVEL == 2
constexpr int kMrV = 2;  // 16-float vectors per tile column: 32 rows
constexpr int kNr = 12;
#elif GOSSIP_ISA_LEVEL == 1
constexpr int kMrV = 1;
constexpr int kNr = 6;
#else
constexpr int kMrV = 1;
constexpr int kNr = 4;
#endif
constexpr int kMr = 16 * kMrV;
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
  return trans ? a[p + static_cast<std::ptrdiff_t>(i) * lda]
               : a[i + static_cast<std::ptrdiff_t>(p) * lda];
}
inline float at_b(bool trans, const float* b, int ldb, int p, int j) {
  return trans ? b[j + static_cast<std::ptrdiff_t>(p) * ldb]
               : b[p + static_cast<std::ptrdiff_t>(j) * ldb];
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

// acc = Σ_p A[:, p] B[p, :] over one packed A panel and one packed B panel (acc = fma(a, b, acc)
// in increasing p, from zero); then C[0:rows, 0:cols] = acc (first k block) or C = C + acc.
void kernel(int kc, const float* ap, const float* bp, float* c, int ldc, int rows, int cols,
            bool accumulate) {
  F16 acc[kMrV][kNr];
#if GOSSIP_ISA_LEVEL == 1
  // AVX2: the 16×6 tile as twelve named __m256 (GCC kept arrays of them, or of F16 pairs, in
  // memory and stored every accumulator on every step).
  static_assert(kNr == 6 && kMrV == 1);
  __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0;
  __m256 h0 = l0, h1 = l0, h2 = l0, h3 = l0, h4 = l0, h5 = l0;
#pragma GCC unroll 4
  for (int p = 0; p < kc; ++p) {
    const __m256 a0 = _mm256_loadu_ps(ap), a1 = _mm256_loadu_ps(ap + 8);
    __m256 b = _mm256_broadcast_ss(bp + 0);
    l0 = _mm256_fmadd_ps(a0, b, l0);
    h0 = _mm256_fmadd_ps(a1, b, h0);
    b = _mm256_broadcast_ss(bp + 1);
    l1 = _mm256_fmadd_ps(a0, b, l1);
    h1 = _mm256_fmadd_ps(a1, b, h1);
    b = _mm256_broadcast_ss(bp + 2);
    l2 = _mm256_fmadd_ps(a0, b, l2);
    h2 = _mm256_fmadd_ps(a1, b, h2);
    b = _mm256_broadcast_ss(bp + 3);
    l3 = _mm256_fmadd_ps(a0, b, l3);
    h3 = _mm256_fmadd_ps(a1, b, h3);
    b = _mm256_broadcast_ss(bp + 4);
    l4 = _mm256_fmadd_ps(a0, b, l4);
    h4 = _mm256_fmadd_ps(a1, b, h4);
    b = _mm256_broadcast_ss(bp + 5);
    l5 = _mm256_fmadd_ps(a0, b, l5);
    h5 = _mm256_fmadd_ps(a1, b, h5);
    ap += kMr;
    bp += kNr;
  }
  acc[0][0] = F16{l0, h0};
  acc[0][1] = F16{l1, h1};
  acc[0][2] = F16{l2, h2};
  acc[0][3] = F16{l3, h3};
  acc[0][4] = F16{l4, h4};
  acc[0][5] = F16{l5, h5};
#else
  for (int v = 0; v < kMrV; ++v) {
    for (int j = 0; j < kNr; ++j) acc[v][j] = F16::zero();
  }
  for (int p = 0; p < kc; ++p) {
    F16 a[kMrV];
    for (int v = 0; v < kMrV; ++v) a[v] = F16::load(ap + 16 * v);
#pragma GCC unroll 12
    for (int j = 0; j < kNr; ++j) {
      const F16 bj = F16::broadcast(bp[j]);
      for (int v = 0; v < kMrV; ++v) acc[v][j] = F16::fma(a[v], bj, acc[v][j]);
    }
    ap += kMr;
    bp += kNr;
  }
#endif
  if (rows == kMr && cols == kNr) {
    for (int j = 0; j < kNr; ++j) {
      float* cj = c + static_cast<std::ptrdiff_t>(j) * ldc;
      for (int v = 0; v < kMrV; ++v) {
        const F16 out = accumulate ? F16::add(F16::load(cj + 16 * v), acc[v][j]) : acc[v][j];
        out.store(cj + 16 * v);
      }
    }
    return;
  }
  alignas(64) float tile[kNr][kMr];
  for (int j = 0; j < kNr; ++j) {
    for (int v = 0; v < kMrV; ++v) acc[v][j].store(tile[j] + 16 * v);
  }
  for (int j = 0; j < cols; ++j) {
    float* cj = c + static_cast<std::ptrdiff_t>(j) * ldc;
    for (int i = 0; i < rows; ++i) cj[i] = accumulate ? cj[i] + tile[j][i] : tile[j][i];
  }
}

}  // namespace

void sgemm_serial(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float* c, int ldc) {
  thread_local PackBuffers buffers;
  const int kc_max = std::min(k, kSgemmKc);
  const int n_padded = (n + kNr - 1) / kNr * kNr;
  float* bpack =
      PackBuffers::grow(buffers.b, buffers.b_size, static_cast<std::size_t>(kc_max) * n_padded);
  float* apack =
      PackBuffers::grow(buffers.a, buffers.a_size, static_cast<std::size_t>(kc_max) * kMc);
  for (int p0 = 0; p0 < k; p0 += kSgemmKc) {
    const int kc = std::min(kSgemmKc, k - p0);
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

}  // namespace gossip::sgd::cpu::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

// Gossip mixing over the state matrix. The kernel is a row-blocked, register-tiled CSR gather: for
// a block of rows, every node's output segment is the weighted sum of its in-neighbours' segments,
// 64 rows at a time with the accumulator in registers across all of the node's terms (one load per
// term and vector, one store per output). A block of all n columns fits in the L2 cache, so however
// many neighbours read a column, it comes from memory once per call: traffic is one read of X and
// one write of the output, the same as a copy.
#include "sim/node_state_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/check.h"
#include "common/isa_kernel_begin.h"
#include "sgd/cpu/simd16.h"

namespace gossip::sim::GOSSIP_ISA_NS {

namespace {

using F16 = sgd::cpu::F16ForLevel<GOSSIP_ISA_LEVEL>;
static_assert(MixingPlan::kMaxBandTerms == 5, "mix_band_dispatch instantiates 2..5 terms");

// Output rows per register tile: 64 floats = four 16-float vectors. The accumulator of a tile
// stays in registers for all of a node's terms, so each output is stored once and each term costs
// one load per vector (no accumulator reload and store per term).
constexpr Eigen::Index kTile = 64;

// o[0..kTile) = Σ_q w_q · x_{col_q}[0..kTile) − γ u, rounded exactly like sgd::Backend::mix:
// acc = w_0·x_0, acc = fma(w_q, x_q, acc) for q ≥ 1, out = fma(−γ, u, acc). `x` points at the
// tile's first row of column 0 (stride d).
template <bool kUpdate>
inline void mix_tile_full(float* o, const float* x, Eigen::Index d, const int* col, const float* w,
                          int terms, float neg_gamma, const float* u) {
  const float* src = x + static_cast<Eigen::Index>(col[0]) * d;
  F16 a0 = F16::mul(w[0], F16::load(src));
  F16 a1 = F16::mul(w[0], F16::load(src + 16));
  F16 a2 = F16::mul(w[0], F16::load(src + 32));
  F16 a3 = F16::mul(w[0], F16::load(src + 48));
  for (int q = 1; q < terms; ++q) {
    src = x + static_cast<Eigen::Index>(col[q]) * d;
    const float wq = w[q];
    a0 = F16::fma(wq, F16::load(src), a0);
    a1 = F16::fma(wq, F16::load(src + 16), a1);
    a2 = F16::fma(wq, F16::load(src + 32), a2);
    a3 = F16::fma(wq, F16::load(src + 48), a3);
  }
  if constexpr (kUpdate) {
    a0 = F16::fma(neg_gamma, F16::load(u), a0);
    a1 = F16::fma(neg_gamma, F16::load(u + 16), a1);
    a2 = F16::fma(neg_gamma, F16::load(u + 32), a2);
    a3 = F16::fma(neg_gamma, F16::load(u + 48), a3);
  }
  a0.store(o);
  a1.store(o + 16);
  a2.store(o + 32);
  a3.store(o + 48);
}

// A run of banded rows (MixingPlan::Band) over the full tiles [0, full) of a row block: output
// node first + g is Σ_q w_q x_{col0 + g + q} (col0 = first + offset), formed from a window of K
// input columns in registers that slides by one column per output, so each input vector is loaded
// once per tile instead of once per term. Per element the operations and their order are
// mix_tile_full's: acc = w_0·x, acc = fma(w_q, x, acc) for q = 1..K−1 (increasing column), then
// out = fma(−γ, u, acc). `x`, `o` and `u` point at row 0 of the block in column 0.
// Rows [k_begin, k_end) of the block, kV vectors (16·kV rows) per column at a time; the range is
// a multiple of 16·kV rows.
template <int K, bool kUpdate, int kV>
void mix_band(float* o, const float* x, Eigen::Index d, Eigen::Index k_begin, Eigen::Index k_end,
              int first, int count, int col0, const float* w, float neg_gamma, const float* u) {
  static_assert(K >= 2);
  F16 wv[K];  // the weights broadcast once (not a memory broadcast per FMA)
  for (int q = 0; q < K; ++q) wv[q] = F16::broadcast(w[q]);
  for (Eigen::Index k0 = k_begin; k0 < k_end; k0 += 16 * kV) {
    F16 win[K - 1][kV];
    for (int q = 0; q < K - 1; ++q) {
      const float* src = x + static_cast<Eigen::Index>(col0 + q) * d + k0;
      for (int v = 0; v < kV; ++v) win[q][v] = F16::load(src + 16 * v);
    }
    for (int g = 0; g < count; ++g) {
      const float* src = x + static_cast<Eigen::Index>(col0 + g + K - 1) * d + k0;
      const Eigen::Index out_offset = static_cast<Eigen::Index>(first + g) * d + k0;
      F16 last[kV];
      for (int v = 0; v < kV; ++v) last[v] = F16::load(src + 16 * v);
      for (int v = 0; v < kV; ++v) {
        F16 acc = F16::mul(wv[0], win[0][v]);
        for (int q = 1; q < K - 1; ++q) acc = F16::fma(wv[q], win[q][v], acc);
        acc = F16::fma(wv[K - 1], last[v], acc);
        if constexpr (kUpdate) acc = F16::fma(neg_gamma, F16::load(u + out_offset + 16 * v), acc);
        acc.store(o + out_offset + 16 * v);
      }
      for (int q = 0; q + 2 < K; ++q) {
        for (int v = 0; v < kV; ++v) win[q][v] = win[q + 1][v];
      }
      for (int v = 0; v < kV; ++v) win[K - 2][v] = last[v];
    }
  }
}

// The rows [full, full + len) (len < kTile) past a row block's last full tile for a whole band:
// mix_band's sliding window with masked loads and stores (the same operations per element).
template <int K, bool kUpdate>
void mix_band_tail(float* o, const float* x, Eigen::Index d, Eigen::Index full, Eigen::Index len,
                   int first, int count, int col0, const float* w, float neg_gamma,
                   const float* u) {
  constexpr int kV = kTile / 16;
  int lens[kV];
  for (int v = 0; v < kV; ++v) {
    lens[v] = static_cast<int>(std::clamp<Eigen::Index>(len - 16 * v, 0, 16));
  }
  F16 wv[K];
  for (int q = 0; q < K; ++q) wv[q] = F16::broadcast(w[q]);
  F16 win[K - 1][kV];
  for (int q = 0; q < K - 1; ++q) {
    const float* src = x + static_cast<Eigen::Index>(col0 + q) * d + full;
    for (int v = 0; v < kV; ++v) win[q][v] = F16::load_head(src + 16 * v, lens[v]);
  }
  for (int g = 0; g < count; ++g) {
    const float* src = x + static_cast<Eigen::Index>(col0 + g + K - 1) * d + full;
    const Eigen::Index out_offset = static_cast<Eigen::Index>(first + g) * d + full;
    F16 last[kV];
    for (int v = 0; v < kV; ++v) last[v] = F16::load_head(src + 16 * v, lens[v]);
    for (int v = 0; v < kV; ++v) {
      F16 acc = F16::mul(wv[0], win[0][v]);
      for (int q = 1; q < K - 1; ++q) acc = F16::fma(wv[q], win[q][v], acc);
      acc = F16::fma(wv[K - 1], last[v], acc);
      if constexpr (kUpdate) {
        acc = F16::fma(neg_gamma, F16::load_head(u + out_offset + 16 * v, lens[v]), acc);
      }
      acc.store_head(o + out_offset + 16 * v, lens[v]);
    }
    for (int q = 0; q + 2 < K; ++q) {
      for (int v = 0; v < kV; ++v) win[q][v] = win[q + 1][v];
    }
    for (int v = 0; v < kV; ++v) win[K - 2][v] = last[v];
  }
}

// Calls f(std::integral_constant<int, K>{}) with K = terms, for 2 <= terms <= kMaxBandTerms: the
// band kernels' term count fixed at compile time.
template <int K = 2, typename F>
void with_band_terms(int terms, const F& f) {
  if constexpr (K > MixingPlan::kMaxBandTerms) {
    GOSSIP_CHECK(false) << "band of " << terms << " terms";
  } else if (terms == K) {
    f(std::integral_constant<int, K>{});
  } else {
    with_band_terms<K + 1>(terms, f);
  }
}

template <bool kUpdate>
void mix_band_tail_dispatch(float* o, const float* x, Eigen::Index d, Eigen::Index full,
                            Eigen::Index len, const MixingPlan::Band& band, const float* w,
                            float neg_gamma, const float* u) {
  const int col0 = band.first + band.offset;
  with_band_terms(band.terms, [&](auto terms) {
    mix_band_tail<decltype(terms)::value, kUpdate>(o, x, d, full, len, band.first, band.count, col0,
                                                   w, neg_gamma, u);
  });
}

template <bool kUpdate>
void mix_band_dispatch(float* o, const float* x, Eigen::Index d, Eigen::Index full,
                       const MixingPlan::Band& band, const float* w, float neg_gamma,
                       const float* u) {
  const int col0 = band.first + band.offset;
  with_band_terms(band.terms, [&](auto terms) {
    constexpr int K = decltype(terms)::value;
    // Up to 3 terms: 128 rows per column and step (window, new column and accumulator: 25 of the
    // 32 vector registers) up to the last whole 128 rows, fewer column (page) switches per byte;
    // the rest, and 4 and 5 terms throughout: 64 rows.
    Eigen::Index wide = 0;
    if constexpr (K <= 3) {
      wide = full / (2 * kTile) * (2 * kTile);
      mix_band<K, kUpdate, 8>(o, x, d, 0, wide, band.first, band.count, col0, w, neg_gamma, u);
    }
    mix_band<K, kUpdate, 4>(o, x, d, wide, full, band.first, band.count, col0, w, neg_gamma, u);
  });
}

// One node's rows [0, len) with the node's K terms fixed at compile time: the K source pointers
// and the K weights (broadcast into registers) are set up once per node and row block instead of
// once per 64-row tile (a column index load, an address computation and a weight broadcast per
// term and tile before). Per element the operations and their order are mix_tile_full's and
// mix_tile_tail's: acc = w_0·x_0, acc = fma(w_q, x_q, acc) for q = 1..K−1, out = fma(−γ, u, acc).
// Exponential graph, n = 64 (7 terms, X in L1/L2), microbenchmark: 40 -> 55 GB/s; no change where
// the terms come from L2/L3 (n = 1024, 11 terms).
template <int K, bool kUpdate>
void mix_rows_fixed(float* o, const float* x, Eigen::Index d, Eigen::Index len, const int* col,
                    const float* w, float neg_gamma, const float* u) {
  const float* src[K];
  F16 wv[K];
  for (int q = 0; q < K; ++q) {
    src[q] = x + static_cast<Eigen::Index>(col[q]) * d;
    wv[q] = F16::broadcast(w[q]);
  }
  [[maybe_unused]] const F16 gv = F16::broadcast(neg_gamma);
  const Eigen::Index full = len / kTile * kTile;
  for (Eigen::Index k = 0; k < full; k += kTile) {
    F16 a[4];
    for (int v = 0; v < 4; ++v) a[v] = F16::mul(wv[0], F16::load(src[0] + k + 16 * v));
    for (int q = 1; q < K; ++q) {
      for (int v = 0; v < 4; ++v) a[v] = F16::fma(wv[q], F16::load(src[q] + k + 16 * v), a[v]);
    }
    if constexpr (kUpdate) {
      for (int v = 0; v < 4; ++v) a[v] = F16::fma(gv, F16::load(u + k + 16 * v), a[v]);
    }
    for (int v = 0; v < 4; ++v) a[v].store(o + k + 16 * v);
  }
  for (Eigen::Index k = full; k < len; k += 16) {
    const int l = static_cast<int>(std::min<Eigen::Index>(16, len - k));
    F16 a = F16::mul(wv[0], F16::load_head(src[0] + k, l));
    for (int q = 1; q < K; ++q) a = F16::fma(wv[q], F16::load_head(src[q] + k, l), a);
    if constexpr (kUpdate) a = F16::fma(gv, F16::load_head(u + k, l), a);
    a.store_head(o + k, l);
  }
}

// mix_rows_fixed for 1..kMaxFixedTerms terms; false (nothing done) for more.
constexpr int kMaxFixedTerms = 16;

template <bool kUpdate, int K = 1>
bool mix_rows_fixed_dispatch(int terms, float* o, const float* x, Eigen::Index d, Eigen::Index len,
                             const int* col, const float* w, float neg_gamma, const float* u) {
  if constexpr (K > kMaxFixedTerms) {
    return false;
  } else {
    if (terms == K) {
      mix_rows_fixed<K, kUpdate>(o, x, d, len, col, w, neg_gamma, u);
      return true;
    }
    return mix_rows_fixed_dispatch<kUpdate, K + 1>(terms, o, x, d, len, col, w, neg_gamma, u);
  }
}

// One node's rows [0, len) of a row block: the fixed-terms kernel, or for more than
// kMaxFixedTerms terms the generic tiles. `u` null: no update term.
void mix_rows(float* o, const float* x, Eigen::Index d, Eigen::Index len, const int* col,
              const float* w, int terms, float neg_gamma, const float* u);

// One node's sum for the rows of a block past its last full tile (len < kTile): the same vectors
// as mix_tile_full with masked loads and stores (F16::load_head/store_head), the same operations
// per element.
void mix_tile_tail(float* o, const float* x, Eigen::Index d, const int* col, const float* w,
                   int terms, float neg_gamma, const float* u, Eigen::Index len) {
  const int l0 = static_cast<int>(std::clamp<Eigen::Index>(len, 0, 16));
  const int l1 = static_cast<int>(std::clamp<Eigen::Index>(len - 16, 0, 16));
  const int l2 = static_cast<int>(std::clamp<Eigen::Index>(len - 32, 0, 16));
  const int l3 = static_cast<int>(std::clamp<Eigen::Index>(len - 48, 0, 16));
  const float* src = x + static_cast<Eigen::Index>(col[0]) * d;
  F16 a0 = F16::mul(w[0], F16::load_head(src, l0));
  F16 a1 = F16::mul(w[0], F16::load_head(src + 16, l1));
  F16 a2 = F16::mul(w[0], F16::load_head(src + 32, l2));
  F16 a3 = F16::mul(w[0], F16::load_head(src + 48, l3));
  for (int q = 1; q < terms; ++q) {
    src = x + static_cast<Eigen::Index>(col[q]) * d;
    const float wq = w[q];
    a0 = F16::fma(wq, F16::load_head(src, l0), a0);
    a1 = F16::fma(wq, F16::load_head(src + 16, l1), a1);
    a2 = F16::fma(wq, F16::load_head(src + 32, l2), a2);
    a3 = F16::fma(wq, F16::load_head(src + 48, l3), a3);
  }
  if (u != nullptr) {
    a0 = F16::fma(neg_gamma, F16::load_head(u, l0), a0);
    a1 = F16::fma(neg_gamma, F16::load_head(u + 16, l1), a1);
    a2 = F16::fma(neg_gamma, F16::load_head(u + 32, l2), a2);
    a3 = F16::fma(neg_gamma, F16::load_head(u + 48, l3), a3);
  }
  a0.store_head(o, l0);
  a1.store_head(o + 16, l1);
  a2.store_head(o + 32, l2);
  a3.store_head(o + 48, l3);
}

void mix_rows(float* o, const float* x, Eigen::Index d, Eigen::Index len, const int* col,
              const float* w, int terms, float neg_gamma, const float* u) {
  if (u != nullptr) {
    if (mix_rows_fixed_dispatch<true>(terms, o, x, d, len, col, w, neg_gamma, u)) return;
  } else {
    if (mix_rows_fixed_dispatch<false>(terms, o, x, d, len, col, w, neg_gamma, nullptr)) return;
  }
  const Eigen::Index full = len / kTile * kTile;
  if (u != nullptr) {
    for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
      mix_tile_full<true>(o + k0, x + k0, d, col, w, terms, neg_gamma, u + k0);
    }
  } else {
    for (Eigen::Index k0 = 0; k0 < full; k0 += kTile) {
      mix_tile_full<false>(o + k0, x + k0, d, col, w, terms, neg_gamma, nullptr);
    }
  }
  if (full < len) {
    mix_tile_tail(o + full, x + full, d, col, w, terms, neg_gamma,
                  u != nullptr ? u + full : nullptr, len - full);
  }
}

}  // namespace

void mix(const MixingPlan& plan, const StateMatrix& x, float gamma, const StateMatrix* update,
         StateMatrix& out) {
  const int n = plan.num_nodes();
  GOSSIP_CHECK_EQ(x.cols(), n);
  GOSSIP_CHECK(out.data() != x.data()) << "mix() output aliases its input";
  if (update != nullptr) {
    GOSSIP_CHECK_EQ(update->rows(), x.rows());
    GOSSIP_CHECK_EQ(update->cols(), x.cols());
    GOSSIP_CHECK(out.data() != update->data()) << "mix() output aliases its update";
  }
  const Eigen::Index d = x.rows();
  out.resize(d, n);
  if (d == 0) return;
  if (padded_rows(d) == d) {
    // Columns of whole 64-byte lines (the simulator's padded state, sim/simulator.h): node by
    // node over the whole column, mix_node's kernel. With no vector load spanning two lines this
    // beat the row blocks and the banded window below at every n (sim_bench, d = 1000 in
    // columns of 1008, 2026-11-23: ring n = 64 130–152 GB/s against 91–101 banded, n = 256
    // 93–95 against 76–86, n = 1024 89–92 against 78–92; exponential graph within ±10%), while
    // with columns of 1000 floats the bands stay ahead (n = 64: 105 against 98).
    for (int i = 0; i < n; ++i) {
      GOSSIP_ISA_NS::mix_node(plan, x, i, gamma,
                              update != nullptr ? update->col(i).data() : nullptr,
                              out.col(i).data());
    }
    return;
  }
  const int* row_begin = plan.row_begin().data();
  const int* column = plan.column().data();
  const float* weight = plan.weight().data();
  const float* in = x.data();
  const float* upd = update != nullptr ? update->data() : nullptr;
  float* result = out.data();
  const float neg_gamma = -gamma;
  // Rows per block: keep a block of all n input columns around 512 KiB (L2-resident), in whole
  // multiples of kTile floats so that the inner loops run on full tiles.
  const Eigen::Index target = (512 * 1024) / (static_cast<Eigen::Index>(sizeof(float)) * n);
  const Eigen::Index block =
      std::min<Eigen::Index>(d, std::max<Eigen::Index>(kTile, target / kTile * kTile));
  const std::vector<MixingPlan::Band>& bands = plan.bands();
  for (Eigen::Index r0 = 0; r0 < d; r0 += block) {
    const Eigen::Index len = std::min(block, d - r0);
    const Eigen::Index full = len / kTile * kTile;
    std::size_t next_band = 0;
    for (int i = 0; i < n; ++i) {
      if (next_band < bands.size() && bands[next_band].first == i) {
        // The band's full tiles, then its partial tile, share loads through the window.
        const MixingPlan::Band& band = bands[next_band++];
        const float* w = weight + row_begin[i];
        if (upd != nullptr) {
          mix_band_dispatch<true>(result + r0, in + r0, d, full, band, w, neg_gamma, upd + r0);
        } else {
          mix_band_dispatch<false>(result + r0, in + r0, d, full, band, w, neg_gamma, nullptr);
        }
        if (full < len) {
          if (upd != nullptr) {
            mix_band_tail_dispatch<true>(result + r0, in + r0, d, full, len - full, band, w,
                                         neg_gamma, upd + r0);
          } else {
            mix_band_tail_dispatch<false>(result + r0, in + r0, d, full, len - full, band, w,
                                          neg_gamma, nullptr);
          }
        }
        i += band.count - 1;
        continue;
      }
      const Eigen::Index offset = static_cast<Eigen::Index>(i) * d + r0;
      float* o = result + offset;
      const int b = row_begin[i], e = row_begin[i + 1];
      if (b == e) {
        std::fill(o, o + len, 0.0f);
        continue;
      }
      const float* u = upd != nullptr ? upd + offset : nullptr;
      mix_rows(o, in + r0, d, len, column + b, weight + b, e - b, neg_gamma, u);
    }
  }
}

void mix_node(const MixingPlan& plan, const StateMatrix& x, int i, float gamma, const float* u,
              float* out_col) {
  GOSSIP_CHECK_EQ(x.cols(), plan.num_nodes());
  GOSSIP_CHECK(i >= 0 && i < plan.num_nodes()) << "node " << i;
  const Eigen::Index d = x.rows();
  const int b = plan.row_begin()[i], e = plan.row_begin()[i + 1];
  if (b == e) {
    std::fill(out_col, out_col + d, 0.0f);
    return;
  }
  const int* column = plan.column().data() + b;
  const float* weight = plan.weight().data() + b;
  const float neg_gamma = -gamma;
  const float* in = x.data();
  mix_rows(out_col, in, d, d, column, weight, e - b, neg_gamma, u);
}

}  // namespace gossip::sim::GOSSIP_ISA_NS

#include "common/isa_kernel_end.h"

// F16: 16 floats as one 512-bit register (F16Avx512), two 256-bit ones (F16Avx2: AVX2 + FMA), or a
// plain array (F16Portable), for kernels whose rounding must not depend on the instruction set.
// Only element-wise multiply, add, fused multiply-add (exactly std::fma), division and square root
// (IEEE, correctly rounded in the default rounding mode), so every type gives identical bits; what
// a kernel sums in which lane is written out by the kernel itself. GCC's
// auto-vectoriser does not keep such accumulators in registers reliably (it spilled them, or
// vectorised across the wrong loop with gathers), hence the explicit types.
//
// The x86 types carry their instruction set as a target attribute, so this header compiles in any
// unit; a kernel unit (common/isa_kernel_begin.h) takes `F16` for its level from
// F16ForLevel<GOSSIP_ISA_LEVEL>, and calls the AVX types only from code compiled for their level.
#pragma once

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define GOSSIP_F16_AVX512 [[gnu::always_inline]] inline __attribute__((target("avx512f,avx2,fma")))
#define GOSSIP_F16_AVX2 [[gnu::always_inline]] inline __attribute__((target("avx2,fma")))
#endif

namespace gossip::sgd::cpu {

#if defined(__x86_64__)
struct F16Avx512 {
  __m512 v;
  GOSSIP_F16_AVX512 static F16Avx512 zero() { return {_mm512_setzero_ps()}; }
  GOSSIP_F16_AVX512 static F16Avx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  GOSSIP_F16_AVX512 void store(float* p) const { _mm512_storeu_ps(p, v); }
  // w·a, fma(w, a, c) with a scalar w; fma(a, b, c) element-wise.
  GOSSIP_F16_AVX512 static F16Avx512 broadcast(float w) { return {_mm512_set1_ps(w)}; }
  GOSSIP_F16_AVX512 static F16Avx512 add(F16Avx512 a, F16Avx512 b) {
    return {_mm512_add_ps(a.v, b.v)};
  }
  GOSSIP_F16_AVX512 static F16Avx512 mul(F16Avx512 a, F16Avx512 b) {
    return {_mm512_mul_ps(a.v, b.v)};
  }
  GOSSIP_F16_AVX512 static F16Avx512 mul(float w, F16Avx512 a) {
    return {_mm512_mul_ps(_mm512_set1_ps(w), a.v)};
  }
  GOSSIP_F16_AVX512 static F16Avx512 fma(float w, F16Avx512 a, F16Avx512 c) {
    return {_mm512_fmadd_ps(_mm512_set1_ps(w), a.v, c.v)};
  }
  GOSSIP_F16_AVX512 static F16Avx512 fma(F16Avx512 a, F16Avx512 b, F16Avx512 c) {
    return {_mm512_fmadd_ps(a.v, b.v, c.v)};
  }
  GOSSIP_F16_AVX512 static F16Avx512 div(F16Avx512 a, F16Avx512 b) {
    return {_mm512_div_ps(a.v, b.v)};
  }
  // maskz with every lane set: _mm512_sqrt_ps itself has an undefined pass-through operand, on
  // which GCC 12 warns falsely (see sum_pairwise).
  GOSSIP_F16_AVX512 static F16Avx512 sqrt(F16Avx512 a) {
    return {_mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xffff), a.v)};
  }
  // The first len lanes (0 ≤ len ≤ 16) of p, zeros above; store only the first len lanes.
  GOSSIP_F16_AVX512 static F16Avx512 load_head(const float* p, int len) {
    return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << len) - 1u), p)};
  }
  GOSSIP_F16_AVX512 void store_head(float* p, int len) const {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << len) - 1u), v);
  }
  // Lanes l < len: fma(a[l], b[l], c[l]); lanes l ≥ len keep c[l] (a and b are read only below
  // len). 0 ≤ len ≤ 16.
  GOSSIP_F16_AVX512 static F16Avx512 fma_head(const float* a, const float* b, int len,
                                              F16Avx512 c) {
    const __mmask16 m = static_cast<__mmask16>((1u << len) - 1u);
    return {
        _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, b), c.v, m)};
  }
  // Pairwise sum of the lanes: lane[l] += lane[l + s] for s = 8, 4, 2, 1; returns lane 0.
  GOSSIP_F16_AVX512 float sum_pairwise() const {
    // GCC vector shuffles, not intrinsics: GCC 12 warns falsely (-Wuninitialized) on the
    // intrinsics' undefined pass-through operands.
    using V = float __attribute__((vector_size(64)));
    V t = reinterpret_cast<const V&>(v);
    t = t +
        __builtin_shufflevector(t, t, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    t = t + __builtin_shufflevector(t, t, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    t = t + __builtin_shufflevector(t, t, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    t = t + __builtin_shufflevector(t, t, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    return t[0];
  }
};

struct F16Avx2 {
  __m256 lo, hi;
  GOSSIP_F16_AVX2 static F16Avx2 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  GOSSIP_F16_AVX2 static F16Avx2 load(const float* p) {
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  }
  GOSSIP_F16_AVX2 void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  GOSSIP_F16_AVX2 static F16Avx2 broadcast(float w) {
    return {_mm256_set1_ps(w), _mm256_set1_ps(w)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 add(F16Avx2 a, F16Avx2 b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 mul(F16Avx2 a, F16Avx2 b) {
    return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 mul(float w, F16Avx2 a) {
    const __m256 b = _mm256_set1_ps(w);
    return {_mm256_mul_ps(b, a.lo), _mm256_mul_ps(b, a.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 fma(float w, F16Avx2 a, F16Avx2 c) {
    const __m256 b = _mm256_set1_ps(w);
    return {_mm256_fmadd_ps(b, a.lo, c.lo), _mm256_fmadd_ps(b, a.hi, c.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 fma(F16Avx2 a, F16Avx2 b, F16Avx2 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 div(F16Avx2 a, F16Avx2 b) {
    return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 sqrt(F16Avx2 a) {
    return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)};
  }
  GOSSIP_F16_AVX2 static F16Avx2 load_head(const float* p, int len) {
    alignas(32) float t[16] = {};
    for (int l = 0; l < len; ++l) t[l] = p[l];
    return load(t);
  }
  GOSSIP_F16_AVX2 void store_head(float* p, int len) const {
    alignas(32) float t[16];
    store(t);
    for (int l = 0; l < len; ++l) p[l] = t[l];
  }
  GOSSIP_F16_AVX2 static F16Avx2 fma_head(const float* a, const float* b, int len, F16Avx2 c) {
    alignas(32) float t[16];
    c.store(t);
    for (int l = 0; l < len; ++l) t[l] = std::fma(a[l], b[l], t[l]);
    return load(t);
  }
  GOSSIP_F16_AVX2 float sum_pairwise() const {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};
#endif  // __x86_64__

struct F16Portable {
  float v[16];
  static F16Portable zero() { return F16Portable{}; }
  static F16Portable load(const float* p) {
    F16Portable r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
  static F16Portable broadcast(float w) {
    F16Portable r;
    for (float& x : r.v) x = w;
    return r;
  }
  static F16Portable add(F16Portable a, F16Portable b) {
    for (int k = 0; k < 16; ++k) a.v[k] = a.v[k] + b.v[k];
    return a;
  }
  static F16Portable mul(F16Portable a, F16Portable b) {
    for (int k = 0; k < 16; ++k) a.v[k] = a.v[k] * b.v[k];
    return a;
  }
  static F16Portable mul(float w, F16Portable a) {
    for (float& x : a.v) x = w * x;
    return a;
  }
  static F16Portable fma(float w, F16Portable a, F16Portable c) {
    for (int k = 0; k < 16; ++k) c.v[k] = std::fma(w, a.v[k], c.v[k]);
    return c;
  }
  static F16Portable fma(F16Portable a, F16Portable b, F16Portable c) {
    for (int k = 0; k < 16; ++k) c.v[k] = std::fma(a.v[k], b.v[k], c.v[k]);
    return c;
  }
  static F16Portable div(F16Portable a, F16Portable b) {
    for (int k = 0; k < 16; ++k) a.v[k] = a.v[k] / b.v[k];
    return a;
  }
  static F16Portable sqrt(F16Portable a) {
    for (float& x : a.v) x = std::sqrt(x);
    return a;
  }
  static F16Portable load_head(const float* p, int len) {
    F16Portable r{};
    for (int l = 0; l < len; ++l) r.v[l] = p[l];
    return r;
  }
  void store_head(float* p, int len) const {
    for (int l = 0; l < len; ++l) p[l] = v[l];
  }
  static F16Portable fma_head(const float* a, const float* b, int len, F16Portable c) {
    for (int l = 0; l < len; ++l) c.v[l] = std::fma(a[l], b[l], c.v[l]);
    return c;
  }
  float sum_pairwise() const {
    float t[16];
    std::memcpy(t, v, sizeof t);
    for (int s = 8; s > 0; s /= 2) {
      for (int l = 0; l < s; ++l) t[l] = t[l] + t[l + s];
    }
    return t[0];
  }
};

// The F16 of an instruction-set level (common/isa_kernel_begin.h's GOSSIP_ISA_LEVEL).
template <int Level>
struct F16ForLevelT {
  using type = F16Portable;
};
#if defined(__x86_64__)
template <>
struct F16ForLevelT<1> {
  using type = F16Avx2;
};
template <>
struct F16ForLevelT<2> {
  using type = F16Avx512;
};
#endif
template <int Level>
using F16ForLevel = typename F16ForLevelT<Level>::type;

}  // namespace gossip::sgd::cpu

// F16: 16 floats as one 512-bit register (AVX-512), two 256-bit ones (AVX2 + FMA), or a plain
// array, for kernels whose rounding must not depend on the instruction set. Only element-wise
// multiply, add and fused multiply-add (exactly std::fma), so every path gives identical bits; what
// a kernel sums in which lane is written out by the kernel itself. GCC's auto-vectoriser does not
// keep such accumulators in registers reliably (it spilled them, or vectorised across the wrong
// loop with gathers), hence the explicit types.
#pragma once

#include <cmath>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace gossip::sgd::cpu {

#if defined(__AVX512F__)
struct F16 {
  __m512 v;
  static F16 zero() { return {_mm512_setzero_ps()}; }
  static F16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  // w·a, fma(w, a, c) with a scalar w; fma(a, b, c) element-wise.
  static F16 broadcast(float w) { return {_mm512_set1_ps(w)}; }
  static F16 mul(F16 a, F16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
  static F16 mul(float w, F16 a) { return {_mm512_mul_ps(_mm512_set1_ps(w), a.v)}; }
  static F16 fma(float w, F16 a, F16 c) { return {_mm512_fmadd_ps(_mm512_set1_ps(w), a.v, c.v)}; }
  static F16 fma(F16 a, F16 b, F16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  // The first len lanes (0 ≤ len ≤ 16) of p, zeros above; store only the first len lanes.
  static F16 load_head(const float* p, int len) {
    return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << len) - 1u), p)};
  }
  void store_head(float* p, int len) const {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << len) - 1u), v);
  }
  // Lanes l < len: fma(a[l], b[l], c[l]); lanes l ≥ len keep c[l] (a and b are read only below
  // len). 0 ≤ len ≤ 16.
  static F16 fma_head(const float* a, const float* b, int len, F16 c) {
    const __mmask16 m = static_cast<__mmask16>((1u << len) - 1u);
    return {_mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, b), c.v,
                                  m)};
  }
  // Pairwise sum of the lanes: lane[l] += lane[l + s] for s = 8, 4, 2, 1; returns lane 0.
  float sum_pairwise() const {
    // GCC vector shuffles, not intrinsics: GCC 12 warns falsely (-Wuninitialized) on the
    // intrinsics' undefined pass-through operands.
    using V = float __attribute__((vector_size(64)));
    V t = reinterpret_cast<const V&>(v);
    t = t + __builtin_shufflevector(t, t, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    t = t + __builtin_shufflevector(t, t, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    t = t + __builtin_shufflevector(t, t, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    t = t + __builtin_shufflevector(t, t, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    return t[0];
  }
};
#elif defined(__AVX2__) && defined(__FMA__)
struct F16 {
  __m256 lo, hi;
  static F16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  static F16 broadcast(float w) { return {_mm256_set1_ps(w), _mm256_set1_ps(w)}; }
  static F16 mul(F16 a, F16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F16 mul(float w, F16 a) {
    const __m256 b = _mm256_set1_ps(w);
    return {_mm256_mul_ps(b, a.lo), _mm256_mul_ps(b, a.hi)};
  }
  static F16 fma(float w, F16 a, F16 c) {
    const __m256 b = _mm256_set1_ps(w);
    return {_mm256_fmadd_ps(b, a.lo, c.lo), _mm256_fmadd_ps(b, a.hi, c.hi)};
  }
  static F16 fma(F16 a, F16 b, F16 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static F16 load_head(const float* p, int len) {
    alignas(32) float t[16] = {};
    for (int l = 0; l < len; ++l) t[l] = p[l];
    return load(t);
  }
  void store_head(float* p, int len) const {
    alignas(32) float t[16];
    store(t);
    for (int l = 0; l < len; ++l) p[l] = t[l];
  }
  static F16 fma_head(const float* a, const float* b, int len, F16 c) {
    alignas(32) float t[16];
    c.store(t);
    for (int l = 0; l < len; ++l) t[l] = std::fma(a[l], b[l], t[l]);
    return load(t);
  }
  float sum_pairwise() const {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};
#else
struct F16 {
  float v[16];
  static F16 zero() { return F16{}; }
  static F16 load(const float* p) {
    F16 r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
  static F16 broadcast(float w) {
    F16 r;
    for (float& x : r.v) x = w;
    return r;
  }
  static F16 mul(F16 a, F16 b) {
    for (int k = 0; k < 16; ++k) a.v[k] = a.v[k] * b.v[k];
    return a;
  }
  static F16 mul(float w, F16 a) {
    for (float& x : a.v) x = w * x;
    return a;
  }
  static F16 fma(float w, F16 a, F16 c) {
    for (int k = 0; k < 16; ++k) c.v[k] = std::fma(w, a.v[k], c.v[k]);
    return c;
  }
  static F16 fma(F16 a, F16 b, F16 c) {
    for (int k = 0; k < 16; ++k) c.v[k] = std::fma(a.v[k], b.v[k], c.v[k]);
    return c;
  }
  static F16 load_head(const float* p, int len) {
    F16 r{};
    for (int l = 0; l < len; ++l) r.v[l] = p[l];
    return r;
  }
  void store_head(float* p, int len) const {
    for (int l = 0; l < len; ++l) p[l] = v[l];
  }
  static F16 fma_head(const float* a, const float* b, int len, F16 c) {
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
#endif

}  // namespace gossip::sgd::cpu

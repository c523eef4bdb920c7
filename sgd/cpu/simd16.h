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
  static F16 mul(float w, F16 a) { return {_mm512_mul_ps(_mm512_set1_ps(w), a.v)}; }
  static F16 fma(float w, F16 a, F16 c) { return {_mm512_fmadd_ps(_mm512_set1_ps(w), a.v, c.v)}; }
  static F16 fma(F16 a, F16 b, F16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
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
};
#endif

}  // namespace gossip::sgd::cpu

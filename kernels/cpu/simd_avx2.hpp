// AVX2 + FMA + F16C vector traits (8 floats per register). Include only from files
// named *_avx2.cpp: they are compiled with -mavx2 -mfma -mf16c and only called after
// the run-time CPU check. Same interface as simd_scalar.hpp / simd_avx512.hpp.
//
// Everything is in an anonymous namespace: each translation unit gets its own copy,
// so the linker can never merge code compiled for different instruction sets.
// Arithmetic that must not be fused is written so that the compiler has nothing
// to contract: products only ever reach an addition through an explicit fmadd.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd_avx2.hpp is only for translation units compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp_approx.hpp"

namespace vc::cpu {
namespace {

struct Avx2Simd {
  using V = __m256;
  static constexpr size_t W = 8;
  // Matmul register tile: 4 x rows by 3 weight rows = 12 accumulators, plus 3
  // weight vectors and 1 x vector: all 16 ymm registers, no spills.
  static constexpr int MR = 4;
  static constexpr int NR = 3;

  // Attention: query heads per pass over a KV block, and V vectors (of W floats)
  // accumulated per pass; sized so the accumulators stay in registers.
  static constexpr int HB = 2;
  static constexpr int DV = 2;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  // Lane i enabled when i < n (n <= 8).
  static __m256i lane_mask(size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // Masked load: lanes >= n read as 0 and never touch memory (no fault past the end).
  static V load_n(const float* p, size_t n) { return _mm256_maskload_ps(p, lane_mask(n)); }
  // bf16 -> f32 exactly: widen to 32 bits and shift into the high half.
  static V load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V load_bf16_n(const uint16_t* p, size_t n) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, p, n * 2);
    return load_bf16(tmp);
  }
  // f16 -> f32 exactly (F16C, subnormals included).
  static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_f16_n(const uint16_t* p, size_t n) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, p, n * 2);
    return load_f16(tmp);
  }
  static void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static void store_n(float* p, V a, size_t n) { _mm256_maskstore_ps(p, lane_mask(n), a); }

  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  /// a*b + c with one rounding.
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  /// Lanes >= n set to 0.
  static V zero_from(V a, size_t n) { return _mm256_and_ps(a, _mm256_castsi256_ps(lane_mask(n))); }
  /// Lane i is p[i] where bit i of `bits` is set, else a's (only those lanes read).
  static V blend_load(V a, unsigned bits, const float* p) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(bits)), bit), bit);
    return _mm256_blendv_ps(a, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }

  /// out[j] = sum of the lanes of a_j by the fixed tree t_i = l_i + l_{i+4}, then
  /// (t0 + t1) + (t2 + t3): four reductions share the shuffles, but every lane
  /// operation only combines values of one vector, so each sum is the same as if
  /// it had been reduced alone (padding vectors are simply zero).
  static constexpr bool kMaskedLoop = false;
  using V4 = __m128;
  static V4 reduce4(V a0, V a1, V a2, V a3) {
    const __m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20),   // [a0.lo a1.lo]
                                     _mm256_permute2f128_ps(a0, a1, 0x31));  // [a0.hi a1.hi]
    const __m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20),
                                     _mm256_permute2f128_ps(a2, a3, 0x31));
    // Within each 128-bit quad [t0 t1 t2 t3]: lane 0 becomes (t0 + t1) + (t2 + t3).
    __m256 u01 = _mm256_add_ps(s01, _mm256_permute_ps(s01, _MM_SHUFFLE(2, 3, 0, 1)));
    __m256 u23 = _mm256_add_ps(s23, _mm256_permute_ps(s23, _MM_SHUFFLE(2, 3, 0, 1)));
    u01 = _mm256_add_ps(u01, _mm256_permute_ps(u01, _MM_SHUFFLE(1, 0, 3, 2)));
    u23 = _mm256_add_ps(u23, _mm256_permute_ps(u23, _MM_SHUFFLE(1, 0, 3, 2)));
    // Lane 0 of u01 = a0, lane 4 = a1; lane 0 of u23 = a2, lane 4 = a3.
    const __m256 g = _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(0, 0, 0, 0));  // [a0 a0 a2 a2 | a1 a1 a3 a3]
    const __m128 lo = _mm256_castps256_ps128(g), hi = _mm256_extractf128_ps(g, 1);
    const __m128 r = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // [a0 a2 a1 a3]
    return _mm_permute_ps(r, _MM_SHUFFLE(3, 1, 2, 0));
  }
  static void reduce4(V a0, V a1, V a2, V a3, float* out) { _mm_storeu_ps(out, reduce4(a0, a1, a2, a3)); }
  /// y[0:n] = s[0:n] (+ bias[0:n]), n <= 4.
  static void store4(float* y, V4 s, const float* bias, size_t n) {
    if (n == 4) {
      if (bias != nullptr) s = _mm_add_ps(s, _mm_loadu_ps(bias));
      _mm_storeu_ps(y, s);
      return;
    }
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(int(n)), _mm_setr_epi32(0, 1, 2, 3));
    if (bias != nullptr) s = _mm_add_ps(s, _mm_maskload_ps(bias, m));
    _mm_maskstore_ps(y, m, s);
  }
  static float reduce_max(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_ps(m, _mm_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtss_f32(m);
  }
  /// e^x, the steps of exp_approx.hpp with FMA.
  static V exp(V x) {
    using namespace exp_approx;
    const __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
    const __m256 above = _mm256_cmp_ps(x, _mm256_set1_ps(kExpHi), _CMP_GT_OQ);
    // max/min return their second operand when one is NaN: NaN propagates.
    const __m256 xc = _mm256_min_ps(_mm256_set1_ps(kExpHi), _mm256_max_ps(_mm256_set1_ps(kExpLo), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    const __m256 z = _mm256_mul_ps(r, r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 r2 = _mm256_andnot_ps(below, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
    return _mm256_blendv_ps(r2, _mm256_set1_ps(__builtin_inff()), above);
  }
};

}  // namespace
}  // namespace vc::cpu

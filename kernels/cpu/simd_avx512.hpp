// AVX-512 (F/BW/VL/DQ) vector traits (16 floats per register). Include only from
// files named *_avx512.cpp: they are compiled for AVX-512 and only called after
// the run-time CPU check. Same interface as simd_scalar.hpp / simd_avx2.hpp.
//
// Everything is in an anonymous namespace: each translation unit gets its own copy,
// so the linker can never merge code compiled for different instruction sets.
// Arithmetic that must not be fused is written so that the compiler has nothing
// to contract: products only ever reach an addition through an explicit fmadd.
#pragma once
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__)
#error "simd_avx512.hpp is only for translation units compiled for AVX-512 F/BW/VL/DQ"
#endif
// GCC 12's AVX-512 intrinsics use a self-initialised "undefined" vector that trips
// -Wuninitialized once inlined (GCC bug 105593); silence it for the header's lines.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/exp_approx.hpp"

namespace vc::cpu {
namespace {

struct Avx512Simd {
  using V = __m512;
  static constexpr size_t W = 16;
  // Matmul register tile: 4 x rows by 4 weight rows = 16 accumulators (+4 weight
  // vectors +1 x vector) out of 32 zmm registers.
  static constexpr int MR = 4;
  static constexpr int NR = 4;

  // Attention: query heads per pass over a KV block, and V vectors (of W floats)
  // accumulated per pass; sized so the accumulators stay in registers.
  static constexpr int HB = 4;
  static constexpr int DV = 4;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static __mmask16 lane_mask(size_t n) { return __mmask16((1u << n) - 1u); }  // n < 16
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // Masked loads: lanes >= n read as 0 and never touch memory (no fault past the end).
  static V load_n(const float* p, size_t n) { return _mm512_maskz_loadu_ps(lane_mask(n), p); }
  // bf16 -> f32 exactly: widen to 32 bits and shift into the high half.
  static V bf16_bits(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V load_bf16(const uint16_t* p) {
    return bf16_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_bf16_n(const uint16_t* p, size_t n) {
    return bf16_bits(_mm256_maskz_loadu_epi16(lane_mask(n), p));
  }
  // f16 -> f32 exactly (subnormals included).
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_f16_n(const uint16_t* p, size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lane_mask(n), p));
  }
  // Masked loads cost the same as plain ones here, so the matmul runs its K loop
  // with a per-step mask (all lanes, then the tail) instead of a separate tail step.
  static constexpr bool kMaskedLoop = true;
  using Mask = __mmask16;
  /// Lanes [0, min(n, W)) enabled.
  static Mask mask_upto(size_t n) { return n >= W ? Mask(0xffff) : lane_mask(n); }
  static V load_m(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static V load_bf16_m(const uint16_t* p, Mask m) { return bf16_bits(_mm256_maskz_loadu_epi16(m, p)); }
  static V load_f16_m(const uint16_t* p, Mask m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
  static void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  static void store_n(float* p, V a, size_t n) { _mm512_mask_storeu_ps(p, lane_mask(n), a); }

  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  /// a*b + c with one rounding.
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  /// Lanes >= n set to 0.
  static V zero_from(V a, size_t n) { return _mm512_maskz_mov_ps(lane_mask(n), a); }
  /// Lane i is p[i] where bit i of `bits` is set, else a's (only those lanes read).
  static V blend_load(V a, unsigned bits, const float* p) {
    return _mm512_mask_loadu_ps(a, __mmask16(bits), p);
  }

  /// out[j] = sum of the 16 lanes of a_j by a fixed tree: quarters q0 + q2 and
  /// q1 + q3, then their sum, then (t0 + t1) + (t2 + t3) within the quarter. Four
  /// reductions share the shuffles, but every lane operation only combines values
  /// of one vector, so each sum is the same as if it had been reduced alone
  /// (padding vectors are simply zero).
  using V4 = __m128;
  /// The first steps of reduce4: quarter j of the result holds a_j's (q0 + q2) +
  /// (q1 + q3), lane by lane (x0 .. x3).
  static V reduce4_quarters(V a0, V a1, V a2, V a3) {
    // [a0.q0+q2, a0.q1+q3, a1.q0+q2, a1.q1+q3] and the same for a2, a3.
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  /// Sixteen reduce4 sums at once: r_i = reduce4_quarters of vectors 4i .. 4i+3;
  /// lane n of reduce16_finish(reduce16_pair(r0, r1), reduce16_pair(r2, r3)) is
  /// vector n's (x0 + x1) + (x2 + x3), the bits reduce4 gives it (each add combines
  /// the same two values; only their lanes differ). Three adds and seven shuffles
  /// where four reduce4 take eight adds and twelve.
  /// Per quarter j: [A.(x0+x1), A.(x2+x3), B.(x0+x1), B.(x2+x3)] for A = ra, B = rb.
  static V reduce16_pair(V ra, V rb) {
    return _mm512_add_ps(_mm512_shuffle_ps(ra, rb, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(ra, rb, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  static V reduce16_finish(V u, V w) {
    // Quarter j, lane k: the sum of vector 4k + j; then put vector n in lane n.
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(u, w, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u, w, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
  }
  static V4 reduce4(V a0, V a1, V a2, V a3) {
    // Quarter j: a_j's (q0+q2) + (q1+q3).
    __m512 r = reduce4_quarters(a0, a1, a2, a3);
    r = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(2, 3, 0, 1)));
    r = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(1, 0, 3, 2)));
    // Lane 0 of each quarter -> lanes 0..3 (a 128-bit extract of lane block 0 is free).
    const __m512 g = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r);
    return _mm512_extractf32x4_ps(g, 0);
  }
  /// y[0:n] = s[0:n] (+ bias[0:n]), n <= 4.
  static void store4(float* y, V4 s, const float* bias, size_t n) {
    const __mmask8 m = __mmask8((1u << n) - 1u);
    if (bias != nullptr) s = _mm_add_ps(s, _mm_maskz_loadu_ps(m, bias));
    _mm_mask_storeu_ps(y, m, s);
  }
  static void reduce4(V a0, V a1, V a2, V a3, float* out) { _mm_storeu_ps(out, reduce4(a0, a1, a2, a3)); }
  static float reduce_max(V a) {
    __m512 m = _mm512_max_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    m = _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(m);
  }
  /// e^x, the steps of exp_approx.hpp with FMA.
  static V exp(V x) {
    using namespace exp_approx;
    const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_LT_OQ);
    const __mmask16 above = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpHi), _CMP_GT_OQ);
    // max/min return their second operand when one is NaN: NaN propagates.
    const __m512 xc = _mm512_min_ps(_mm512_set1_ps(kExpHi), _mm512_max_ps(_mm512_set1_ps(kExpLo), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    const __m512 r2 = _mm512_maskz_mov_ps(__mmask16(~below), _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
    return _mm512_mask_mov_ps(r2, above, _mm512_set1_ps(__builtin_inff()));
  }
};

}  // namespace
}  // namespace vc::cpu

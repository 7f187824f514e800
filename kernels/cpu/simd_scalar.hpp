// Portable "vector" traits for the scalar path: 8 floats in an array, ops lane by
// lane (the compiler may map them onto SSE2, which changes nothing numerically:
// there is no FMA in baseline x86-64, so a*b+c is always two roundings).
// Same interface as simd_avx2.hpp / simd_avx512.hpp, so the generic kernels
// (matmul_kernel.hpp, attention_kernel.hpp, swiglu_kernel.hpp) run on all paths.
//
// Everything is in an anonymous namespace: each translation unit gets its own copy,
// so the linker can never merge code compiled for different instruction sets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp_approx.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {
namespace {

struct ScalarVec {
  float v[8];
};

struct ScalarSimd {
  using V = ScalarVec;
  static constexpr size_t W = 8;   // lanes
  static constexpr int MR = 2;     // matmul register tile: x rows
  static constexpr int NR = 2;     //   x weight rows

  // Attention: query heads per pass over a KV block, and V vectors (of W floats)
  // accumulated per pass; sized so the accumulators stay in registers.
  static constexpr int HB = 2;
  static constexpr int DV = 2;

  static V zero() { return set1(0.f); }
  static V set1(float a) {
    V r;
    for (size_t i = 0; i < W; ++i) r.v[i] = a;
    return r;
  }
  static V load(const float* p) {
    V r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static V load_n(const float* p, size_t n) {
    V r = zero();
    std::memcpy(r.v, p, n * sizeof(float));
    return r;
  }
  static V load_bf16(const uint16_t* p) { return load_bf16_n(p, W); }
  static V load_bf16_n(const uint16_t* p, size_t n) {
    V r = zero();
    for (size_t i = 0; i < n; ++i) r.v[i] = bf16_to_f32(p[i]);
    return r;
  }
  static V load_f16(const uint16_t* p) { return load_f16_n(p, W); }
  static V load_f16_n(const uint16_t* p, size_t n) {
    V r = zero();
    for (size_t i = 0; i < n; ++i) r.v[i] = f16_to_f32(p[i]);
    return r;
  }
  static void store(float* p, V a) { std::memcpy(p, a.v, sizeof a.v); }
  static void store_n(float* p, V a, size_t n) { std::memcpy(p, a.v, n * sizeof(float)); }

#define VC_SCALAR_LANEWISE(name, expr)          \
  static V name(V a, V b) {                     \
    V r;                                        \
    for (size_t i = 0; i < W; ++i) {            \
      const float x = a.v[i], y = b.v[i];       \
      r.v[i] = (expr);                          \
    }                                           \
    return r;                                   \
  }
  VC_SCALAR_LANEWISE(add, x + y)
  VC_SCALAR_LANEWISE(sub, x - y)
  VC_SCALAR_LANEWISE(mul, x * y)
  VC_SCALAR_LANEWISE(div, x / y)
  VC_SCALAR_LANEWISE(max, x > y ? x : y)  // as x86 maxps
#undef VC_SCALAR_LANEWISE

  /// a*b + c, rounded twice (baseline x86-64 has no FMA).
  static V fmadd(V a, V b, V c) {
    V r;
    for (size_t i = 0; i < W; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  /// Lanes >= n set to 0.
  static V zero_from(V a, size_t n) {
    for (size_t i = n; i < W; ++i) a.v[i] = 0.f;
    return a;
  }
  /// Lane i is p[i] where bit i of `bits` is set, else a's (only those lanes read).
  static V blend_load(V a, unsigned bits, const float* p) {
    for (size_t i = 0; i < W; ++i)
      if ((bits >> i) & 1u) a.v[i] = p[i];
    return a;
  }
  /// out[j] = sum of the lanes of a_j, by the fixed tree (l_i + l_{i+4}), then
  /// (t0 + t1) + (t2 + t3). Each sum only involves its own vector.
  static constexpr bool kMaskedLoop = false;
  struct V4 {
    float v[4];
  };
  static V4 reduce4(V a0, V a1, V a2, V a3) {
    V4 r;
    reduce4(a0, a1, a2, a3, r.v);
    return r;
  }
  /// y[0:n] = s[0:n] (+ bias[0:n]), n <= 4.
  static void store4(float* y, V4 s, const float* bias, size_t n) {
    for (size_t j = 0; j < n; ++j) y[j] = bias != nullptr ? s.v[j] + bias[j] : s.v[j];
  }
  static void reduce4(V a0, V a1, V a2, V a3, float* out) {
    const V* a[4] = {&a0, &a1, &a2, &a3};
    for (int j = 0; j < 4; ++j) {
      const float* l = a[j]->v;
      const float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
      out[j] = (t0 + t1) + (t2 + t3);
    }
  }
  static float reduce_max(V a) {
    float m = a.v[0];
    for (size_t i = 1; i < W; ++i) m = m > a.v[i] ? m : a.v[i];
    return m;
  }
  static float exp1(float x) {
    using namespace exp_approx;
    if (x != x) return x;
    if (x < kExpLo) return 0.f;
    if (x > kExpHi) return __builtin_inff();
    const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
    float r = x - n * kLn2Hi;
    r = r - n * kLn2Lo;
    const float z = r * r;
    float p = kP0 * r + kP1;
    p = p * r + kP2;
    p = p * r + kP3;
    p = p * r + kP4;
    p = p * r + kP5;
    const float y = (p * z + r) + 1.f;
    const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return y * scale;
  }
  static V exp(V a) {
    for (size_t i = 0; i < W; ++i) a.v[i] = exp1(a.v[i]);
    return a;
  }
};

}  // namespace
}  // namespace vc::cpu

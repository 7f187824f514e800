// Device-only (include from .cu files): the single-precision exp() approximation of
// the CPU kernels (kernels/cpu/exp_approx.hpp, simd_scalar.hpp exp1), step by step
// with round-to-nearest intrinsics so that nvcc cannot contract a multiply and an
// add into an FMA: the same input gives the bits of the CPU's scalar path.
#pragma once
#include "kernels/cpu/exp_approx.hpp"

namespace vc::cuda {

/// exp(x): 0 below kExpLo, +inf above kExpHi, NaN propagates, exp(0) == 1.
__device__ __forceinline__ float exp_approx(float x) {
  using namespace vc::cpu::exp_approx;
  if (x != x) return x;
  if (x < kExpLo) return 0.f;
  if (x > kExpHi) return __int_as_float(0x7f800000);
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(x, kLog2e), kRoundMagic), kRoundMagic);
  float r = __fsub_rn(x, __fmul_rn(n, kLn2Hi));
  r = __fsub_rn(r, __fmul_rn(n, kLn2Lo));
  const float z = __fmul_rn(r, r);
  float p = __fadd_rn(__fmul_rn(kP0, r), kP1);
  p = __fadd_rn(__fmul_rn(p, r), kP2);
  p = __fadd_rn(__fmul_rn(p, r), kP3);
  p = __fadd_rn(__fmul_rn(p, r), kP4);
  p = __fadd_rn(__fmul_rn(p, r), kP5);
  const float y = __fadd_rn(__fadd_rn(__fmul_rn(p, z), r), 1.f);
  return __fmul_rn(y, __int_as_float((int(n) + 127) << 23));
}

}  // namespace vc::cuda

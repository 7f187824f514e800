// Constants of the single-precision exp() approximation shared by every SIMD path
// (softmax in attention, silu in swiglu). Cephes-style: n = round(x / ln 2),
// r = x - n ln 2 (two-constant Cody-Waite reduction), e^r by a degree-7 polynomial,
// times 2^n built from the exponent bits. About 1 ulp on [kExpLo, kExpHi]; inputs
// below kExpLo give 0 (so exp(-inf) == 0, no subnormals), inputs above kExpHi give
// +inf, NaN propagates, and exp(0) == 1 exactly.
//
// Only constants live here (internal linkage), no code: each path implements the
// same steps with its own instructions, so each path is deterministic on its own.
#pragma once

namespace vc::cpu::exp_approx {

constexpr float kExpHi = 88.3762626647949f;   // n stays <= 127: 2^n is a normal float
constexpr float kExpLo = -87.3365447504f;      // n stays >= -126
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;         // few mantissa bits: n * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kRoundMagic = 12582912.0f;     // 1.5 * 2^23: x + magic - magic rounds x
constexpr float kP0 = 1.9875691500e-4f;        // polynomial: ((((P0 r + P1) r + P2) r
constexpr float kP1 = 1.3981999507e-3f;        //   + P3) r + P4) r + P5) r^2 + r + 1
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

}  // namespace vc::cpu::exp_approx

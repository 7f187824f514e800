// Per-row transforms that a compressed view undoes on every draft step when its
// rows are stored transformed: RotateKV's normalised Walsh-Hadamard rotation and
// KVQuant's rotate-half RoPE of pre-RoPE keys (angles' cos and sin in double). Each
// SIMD path performs the scalar path's operations in the same order on every
// element (butterflies stage by stage; double multiplies and an add or subtract,
// never fused; one rounding to float), so every path gives the same bits.
#pragma once
#include <cstddef>

namespace vc::cpu {

/// Each of `rows` rows of d floats (d a power of two) becomes H x / sqrt(d), H the
/// Sylvester Hadamard matrix: log2(d) butterfly passes (a + b, a - b for lanes j and
/// j + h, h = 1, 2, 4, ...), then a multiply by float(1 / sqrt(d)). Its own inverse.
/// Throws vc::Error unless d is a power of two.
void hadamard_rows(float* x, size_t rows, size_t d);

/// Rotate-half RoPE of one row of d (even) floats: for i < d/2, with c = cs[2i],
/// s = sign * cs[2i + 1] (the angle's cos and sin, in double),
///   x[i] = float(x[i] * c - x[i + d/2] * s),  x[i + d/2] = float(x[i + d/2] * c + x[i] * s),
/// each product and the sum rounded in double. sign -1 undoes it.
void rope_row_f64(float* x, size_t d, const double* cs, double sign);

}  // namespace vc::cpu

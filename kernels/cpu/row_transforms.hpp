// Per-row transforms that a compressed view undoes on every draft step when its
// rows are stored transformed: RotateKV's normalised Walsh-Hadamard rotation and
// KVQuant's rotate-half RoPE of pre-RoPE keys (in float, the angles' cos and sin
// computed in double). Each SIMD path performs the scalar path's operations in the
// same order on every element (butterflies stage by stage; multiplies and an add or
// subtract, never fused), so every path gives the same bits.
#pragma once
#include <cstddef>

namespace vc::cpu {

/// Each of `rows` rows of d floats (d a power of two) becomes H x / sqrt(d), H the
/// Sylvester Hadamard matrix: log2(d) butterfly passes (a + b, a - b for lanes j and
/// j + h, h = 1, 2, 4, ...), then a multiply by float(1 / sqrt(d)). Its own inverse.
/// Throws vc::Error unless d is a power of two.
void hadamard_rows(float* x, size_t rows, size_t d);

/// Rotate-half RoPE of one row of d (even) floats: for i < h = d/2, with c = cs[i],
/// s = sign * cs[h + i] (the angle's cos and sin; cs: [cos h][sin h]),
///   x[i] = x[i] * c - x[i + h] * s,  x[i + h] = x[i + h] * c + x[i] * s,
/// in float, each product rounded before the sum (never fused). sign -1 undoes it.
void rope_row(float* x, size_t d, const float* cs, float sign);

/// cos and sin of pos * inv_freq[i] (the angle in double, std::cos / std::sin,
/// rounded to float) for i < h, at every position up to last_pos: row p at
/// table + p * 2h, laid out [cos h][sin h] as rope_row reads it. A per-thread cache
/// (a model constant, like the cos/sin cache of GPU engines) grown to the largest
/// position asked: the pointer stays valid until this thread asks for a larger
/// position or other frequencies.
const float* rope_table(const float* inv_freq, size_t h, size_t last_pos);

}  // namespace vc::cpu

// The fast Walsh-Hadamard transform, normalised so that it is orthonormal and its
// own inverse (used by RotateKV to spread outlier channels before quantizing).
#pragma once
#include <cstddef>

namespace vc {

/// Replaces x[0..n) by H x / sqrt(n), H the Sylvester Hadamard matrix of order n.
/// Applying it twice returns x. Throws vc::Error unless n is a power of two.
void hadamard_inplace(float* x, size_t n);

}  // namespace vc

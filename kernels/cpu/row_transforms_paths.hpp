// Internal: the per-SIMD-path kernels of row_transforms.hpp (arguments checked by
// row_transforms.cpp); tests call them directly to compare the paths.
#pragma once
#include <cstddef>

namespace vc::cpu {

void hadamard_rows_scalar(float* x, size_t rows, size_t d);
void hadamard_rows_avx512(float* x, size_t rows, size_t d);
void rope_row_f64_scalar(float* x, size_t d, const double* cs, double sign);
void rope_row_f64_avx512(float* x, size_t d, const double* cs, double sign);

}  // namespace vc::cpu

// Internal: the per-SIMD-path kernels of row_transforms.hpp (arguments checked by
// row_transforms.cpp); tests call them directly to compare the paths.
#pragma once
#include <cstddef>

namespace vc::cpu {

void hadamard_rows_scalar(float* x, size_t rows, size_t d);
void hadamard_rows_avx512(float* x, size_t rows, size_t d);
void rope_row_scalar(float* x, size_t d, const float* cs, float sign);
void rope_row_avx512(float* x, size_t d, const float* cs, float sign);

}  // namespace vc::cpu

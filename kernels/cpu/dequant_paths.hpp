// Internal: the per-SIMD-path entry points of dequantize_rows (dequant.hpp), which
// kernels/cpu/dequant.cpp dispatches to after checking the arguments; tests call
// them directly to compare the paths.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vc::cpu {

void dequantize_rows_scalar(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                            size_t rows, size_t d, const uint16_t* zero, const uint16_t* scale,
                            size_t group_cols, size_t params_row_stride, float* out);
void dequantize_rows_avx2(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                          size_t rows, size_t d, const uint16_t* zero, const uint16_t* scale,
                          size_t group_cols, size_t params_row_stride, float* out);
void dequantize_rows_avx512(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                            size_t rows, size_t d, const uint16_t* zero, const uint16_t* scale,
                            size_t group_cols, size_t params_row_stride, float* out);

void f16_to_f32_n_scalar(const uint16_t* h, size_t n, float* out);
void f16_to_f32_n_avx2(const uint16_t* h, size_t n, float* out);
void f16_to_f32_n_avx512(const uint16_t* h, size_t n, float* out);

}  // namespace vc::cpu

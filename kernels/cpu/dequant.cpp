// dequantize_rows: checks its arguments, then runs the active SIMD path's kernel.
#include "kernels/cpu/dequant.hpp"

#include <string>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant_paths.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

void dequantize_rows(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                     size_t rows, size_t d, const uint16_t* zero, const uint16_t* scale,
                     size_t group_cols, size_t params_row_stride, float* out) {
  if (bits < 1 || bits > 16)
    throw Error("dequantize_rows: bits must be in 1..16, got " + std::to_string(bits));
  if (group_cols == 0) throw Error("dequantize_rows: group_cols must be at least 1, got 0");
  if (rows == 0 || d == 0) return;
  const size_t end_bits = (first + rows * d) * size_t(bits);
  if ((end_bits + 7) / 8 > codes_bytes)
    throw Error("dequantize_rows: codes [" + std::to_string(first) + ", " +
                std::to_string(first + rows * d) + ") of " + std::to_string(bits) +
                " bits run past the " + std::to_string(codes_bytes) + "-byte code buffer");
  switch (active_simd_path()) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return dequantize_rows_avx512(codes, codes_bytes, bits, first, rows, d, zero, scale,
                                    group_cols, params_row_stride, out);
    case SimdPath::avx2:
      return dequantize_rows_avx2(codes, codes_bytes, bits, first, rows, d, zero, scale,
                                  group_cols, params_row_stride, out);
    case SimdPath::scalar:
      break;
  }
  dequantize_rows_scalar(codes, codes_bytes, bits, first, rows, d, zero, scale, group_cols,
                         params_row_stride, out);
}

void f16_to_f32_n(const uint16_t* h, size_t n, float* out) {
  switch (active_simd_path()) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return f16_to_f32_n_avx512(h, n, out);
    case SimdPath::avx2:
      return f16_to_f32_n_avx2(h, n, out);
    case SimdPath::scalar:
      break;
  }
  f16_to_f32_n_scalar(h, n, out);
}

}  // namespace vc::cpu

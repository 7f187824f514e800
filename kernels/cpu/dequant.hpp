// Dequantization of bit-packed quantization codes into fp32 rows: the inner loop of
// drafting over a quantized compressed view (KIVI, KVQuant, RotateKV), where every
// draft step unpacks the kept rows again.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vc::cpu {

/// out[r * d + c] = zero_r[g] + float(code(first + r * d + c)) * scale_r[g] for r < rows,
/// c < d, g = c / group_cols: rows of a quantized [n, d] matrix whose columns are
/// quantized in groups of `group_cols`, each group with an fp16 zero and scale.
/// zero_r = zero + r * params_row_stride (likewise scale_r): fp16 bits,
/// ceil(d / group_cols) of them per row, converted exactly; params_row_stride 0 when
/// all the rows share them (a row group), or the stride between rows' groups when
/// each row has its own (per-token groups). code(i) is the i-th `bits`-bit code of
/// `codes` (1..16 bits, packed densely, least significant bit first). The multiply
/// and the add are rounded separately (never fused), so every SIMD path gives the
/// same bits as the scalar path and as the codecs that wrote the values.
/// `codes_bytes` is the size of the code buffer: no path reads past it. Throws
/// vc::Error when `bits` is out of range, group_cols is 0 or the codes asked for run
/// past `codes_bytes`.
void dequantize_rows(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                     size_t rows, size_t d, const uint16_t* zero, const uint16_t* scale,
                     size_t group_cols, size_t params_row_stride, float* out);

/// out[i] = the fp16 value h[i] as fp32 for i < n: exact (subnormals and infinities
/// included; a NaN stays a NaN, possibly quieted), the active SIMD path's conversion
/// instruction where it has one.
/// The zeros and scales of quantized rows are converted with it once per block.
void f16_to_f32_n(const uint16_t* h, size_t n, float* out);

}  // namespace vc::cpu

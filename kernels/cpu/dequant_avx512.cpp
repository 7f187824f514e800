// dequantize_rows for the avx512 path. The groups' fp16 zeros and scales are expanded
// to one float per column (F16C, exact). Then sixteen codes per step go straight from
// the packed bytes into registers: sixteen codes of `bits` bits start on a byte
// boundary when their first index is a multiple of 8; each 128-bit lane (four codes)
// loads the 16 bytes from the byte holding its first code, a byte shuffle puts each
// code's (at most 4) bytes in its 32-bit lane, and a per-lane shift and mask leave
// the code. Then zero + float(code) * scale, multiply and add rounded separately
// (this file is compiled with -ffp-contract=off): the scalar path's bits.
// GCC 12's AVX-512 intrinsics use a self-initialised "undefined" vector that trips
// -Wuninitialized once inlined (GCC bug 105593); silenced for the header's lines, as
// in simd_avx512.hpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <vector>

#include "kernels/cpu/dequant_code.hpp"
#include "kernels/cpu/dequant_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx512.hpp"

namespace vc::cpu {
namespace {

// The fp16 zeros (or scales) of a row's column groups, one float per column (the
// conversion is exact, subnormals included; per-channel groups 16 at a time).
void expand_groups(const uint16_t* h, size_t d, size_t group_cols, float* out) {
  if (group_cols == 1) return f16_to_f32_n_avx512(h, d, out);
  for (size_t c0 = 0, g = 0; c0 < d; c0 += group_cols, ++g) {
    const float v = _cvtsh_ss(h[g]);
    const __m512 all = _mm512_set1_ps(v);
    const size_t end = c0 + group_cols < d ? c0 + group_cols : d;
    size_t c = c0;
    for (; c + 16 <= end; c += 16) _mm512_storeu_ps(out + c, all);
    for (; c < end; ++c) out[c] = v;
  }
}

// Rows [0, rows) of d codes from code index `first`, with per-column zero and scale.
void dequantize_group_rows(const Unpack16& u, const uint8_t* codes, size_t codes_bytes, int bits,
                           size_t first, size_t rows, size_t d, const float* zero,
                           const float* scale, float* out) {
  // Locals, not u's fields: stores to the rows may alias them (__m512i may alias).
  const __m512i shuffle = u.shuffle, shift = u.shift, mask = u.mask;
  const size_t lane_byte[4] = {u.lane_byte[0], u.lane_byte[1], u.lane_byte[2], u.lane_byte[3]};
  const size_t reach = u.reach, b = size_t(bits);
  const bool narrow = u.narrow;
  for (size_t r = 0; r < rows; ++r) {
    float* row = out + r * d;
    const size_t i0 = first + r * d;
    size_t c = 0;
    for (; c < d && (i0 + c) % 8 != 0; ++c)
      row[c] = dequant_value(zero[c], scale[c], float(dequant_code_at(codes, codes_bytes, i0 + c, bits)));
    for (; c < d; c += 16) {
      const size_t byte = (i0 + c) / 8 * b;
      if (byte + reach > codes_bytes) break;  // the last codes of the buffer
      const __m512 f = narrow ? codes16_narrow(shuffle, shift, mask, codes + byte)
                              : codes16(shuffle, shift, mask, lane_byte, codes + byte);
      if (c + 16 <= d) {
        const __m512 v = _mm512_add_ps(_mm512_loadu_ps(zero + c), _mm512_mul_ps(f, _mm512_loadu_ps(scale + c)));
        _mm512_storeu_ps(row + c, v);
      } else {  // the row's tail: lanes past d are neither read nor written
        const __mmask16 m = __mmask16((1u << (d - c)) - 1u);
        const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, zero + c),
                                       _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, scale + c)));
        _mm512_mask_storeu_ps(row + c, m, v);
      }
    }
    for (; c < d; ++c)
      row[c] = dequant_value(zero[c], scale[c], float(dequant_code_at(codes, codes_bytes, i0 + c, bits)));
  }
}

}  // namespace

void dequantize_rows_avx512(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                            size_t rows, size_t d, const uint16_t* zero_f16, const uint16_t* scale_f16,
                            size_t group_cols, size_t params_row_stride, float* out) {
  const Unpack16& u = unpack16(bits);
  thread_local std::vector<float> params;  // per column: zeros, then scales
  params.resize(2 * d);
  float* const zero = params.data();
  float* const scale = zero + d;
  // All rows at once when they share their groups' zeros and scales, else row by row.
  const size_t step = params_row_stride == 0 ? rows : 1;
  for (size_t r = 0; r < rows; r += step) {
    expand_groups(zero_f16 + r * params_row_stride, d, group_cols, zero);
    expand_groups(scale_f16 + r * params_row_stride, d, group_cols, scale);
    dequantize_group_rows(u, codes, codes_bytes, bits, first + r * d, step, d, zero, scale, out + r * d);
  }
}

void f16_to_f32_n_avx512(const uint16_t* h, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
  }
}

}  // namespace vc::cpu

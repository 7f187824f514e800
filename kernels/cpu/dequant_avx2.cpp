// dequantize_rows for the avx2 path. The groups' fp16 zeros and scales (F16C, exact)
// are broadcast per group when groups are whole vectors (per-token groups), else
// expanded to one float per column once per row group. Then eight codes per step go
// straight from the packed bytes into registers: eight codes of `bits` bits start on
// a byte boundary when their first index is a multiple of 8; each 128-bit half (four
// codes) loads the 16 bytes from the byte holding its first code (up to 8 bits one
// load serves both), a byte shuffle puts each code's (at most 4) bytes in its 32-bit
// lane, and a per-lane shift and mask leave the code. Then zero + float(code) *
// scale, multiply and add rounded separately (this file is compiled with
// -ffp-contract=off): the scalar path's bits.
#include <immintrin.h>

#include <vector>

#include "kernels/cpu/dequant_code.hpp"
#include "kernels/cpu/dequant_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx2.hpp"

namespace vc::cpu {
namespace {

inline __m256i lanes_below(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The fp16 zeros (or scales) of a row's column groups, one float per column (F16C
// converts exactly, subnormals included; per-channel groups 8 at a time).
void expand_groups(const uint16_t* h, size_t d, size_t group_cols, float* out) {
  if (group_cols == 1) return f16_to_f32_n_avx2(h, d, out);
  for (size_t c0 = 0, g = 0; c0 < d; c0 += group_cols, ++g) {
    const float v = _cvtsh_ss(h[g]);
    const __m256 all = _mm256_set1_ps(v);
    const size_t end = c0 + group_cols < d ? c0 + group_cols : d;
    size_t c = c0;
    for (; c + 8 <= end; c += 8) _mm256_storeu_ps(out + c, all);
    for (; c < end; ++c) out[c] = v;
  }
}

// Rows [0, rows) of d codes from code index `first`, with per-column zero and scale.
template <bool Narrow>
void dequantize_group_rows(const Unpack8& u, const uint8_t* codes, size_t codes_bytes, int bits,
                           size_t first, size_t rows, size_t d, const float* zero,
                           const float* scale, float* out) {
  // Locals, not u's fields: stores to the rows may alias them (__m256i may alias).
  const __m256i shuffle = u.shuffle, shift = u.shift, mask = u.mask;
  const size_t hi_byte = u.hi_byte, reach = u.reach, b = size_t(bits);
  for (size_t r = 0; r < rows; ++r) {
    float* row = out + r * d;
    const size_t i0 = first + r * d;
    size_t c = 0;
    for (; c < d && (i0 + c) % 8 != 0; ++c)
      row[c] = dequant_value(zero[c], scale[c], float(dequant_code_at(codes, codes_bytes, i0 + c, bits)));
    for (; c < d; c += 8) {
      const size_t byte = (i0 + c) / 8 * b;
      if (byte + reach > codes_bytes) break;  // the last codes of the buffer
      const __m256 f = codes8<Narrow>(shuffle, shift, mask, hi_byte, codes + byte);
      if (c + 8 <= d) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(zero + c), _mm256_mul_ps(f, _mm256_loadu_ps(scale + c)));
        _mm256_storeu_ps(row + c, v);
      } else {  // the row's tail: lanes past d are neither read nor written
        const __m256i m = lanes_below(d - c);
        const __m256 v = _mm256_add_ps(_mm256_maskload_ps(zero + c, m),
                                       _mm256_mul_ps(f, _mm256_maskload_ps(scale + c, m)));
        _mm256_maskstore_ps(row + c, m, v);
      }
    }
    for (; c < d; ++c)
      row[c] = dequant_value(zero[c], scale[c], float(dequant_code_at(codes, codes_bytes, i0 + c, bits)));
  }
}

// One row whose column groups are whole vectors (group_cols a multiple of 8, the row
// starting on a multiple of 8 codes): each group's zero and scale are broadcast
// straight from fp16, without expanding them per column. False (nothing written)
// when the row's last codes are too near the end of the buffer for the vector loads.
template <bool Narrow>
bool dequantize_row_broadcast(const Unpack8& u, const uint8_t* codes, size_t codes_bytes, int bits,
                              size_t i0, size_t d, const uint16_t* zero_f16,
                              const uint16_t* scale_f16, size_t group_cols, float* row) {
  const size_t b = size_t(bits);
  if ((i0 + (d - 1) / 8 * 8) / 8 * b + u.reach > codes_bytes) return false;
  const __m256i shuffle = u.shuffle, shift = u.shift, mask = u.mask;
  const size_t hi_byte = u.hi_byte;
  for (size_t c0 = 0, g = 0; c0 < d; c0 += group_cols, ++g) {
    const __m256 z = _mm256_set1_ps(_cvtsh_ss(zero_f16[g])), s = _mm256_set1_ps(_cvtsh_ss(scale_f16[g]));
    const size_t end = c0 + group_cols < d ? c0 + group_cols : d;
    for (size_t c = c0; c < end; c += 8) {
      const __m256 f = codes8<Narrow>(shuffle, shift, mask, hi_byte, codes + (i0 + c) / 8 * b);
      const __m256 v = _mm256_add_ps(z, _mm256_mul_ps(f, s));
      if (c + 8 <= end)
        _mm256_storeu_ps(row + c, v);
      else
        _mm256_maskstore_ps(row + c, lanes_below(end - c), v);
    }
  }
  return true;
}

}  // namespace

void dequantize_rows_avx2(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                          size_t rows, size_t d, const uint16_t* zero_f16, const uint16_t* scale_f16,
                          size_t group_cols, size_t params_row_stride, float* out) {
  const Unpack8& u = unpack8(bits);
  thread_local std::vector<float> params;  // per column: zeros, then scales
  params.resize(2 * d);
  float* const zero = params.data();
  float* const scale = zero + d;
  auto expanded_rows = [&](size_t r, size_t count) {  // rows [r, r + count), sharing groups
    expand_groups(zero_f16 + r * params_row_stride, d, group_cols, zero);
    expand_groups(scale_f16 + r * params_row_stride, d, group_cols, scale);
    const size_t i0 = first + r * d;
    if (bits <= 8)
      dequantize_group_rows<true>(u, codes, codes_bytes, bits, i0, count, d, zero, scale, out + r * d);
    else
      dequantize_group_rows<false>(u, codes, codes_bytes, bits, i0, count, d, zero, scale, out + r * d);
  };
  if (group_cols % 8 == 0) {  // groups of whole vectors (per-token groups): broadcast
    for (size_t r = 0; r < rows; ++r) {
      const size_t i0 = first + r * d;
      const uint16_t *zr = zero_f16 + r * params_row_stride, *sr = scale_f16 + r * params_row_stride;
      float* row = out + r * d;
      const bool done =
          i0 % 8 == 0 &&
          (bits <= 8
               ? dequantize_row_broadcast<true>(u, codes, codes_bytes, bits, i0, d, zr, sr, group_cols, row)
               : dequantize_row_broadcast<false>(u, codes, codes_bytes, bits, i0, d, zr, sr, group_cols, row));
      if (!done) expanded_rows(r, 1);
    }
    return;
  }
  // All rows at once when they share their groups' zeros and scales, else row by row.
  const size_t step = params_row_stride == 0 ? rows : 1;
  for (size_t r = 0; r < rows; r += step) expanded_rows(r, step);
}

void f16_to_f32_n_avx2(const uint16_t* h, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
}

}  // namespace vc::cpu

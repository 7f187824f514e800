// row_transforms.hpp for the avx512 path. Hadamard: a row of 16..256 floats is held
// in vectors through every pass; spans 1..8 pair lanes of one vector (a shuffle
// brings each lane its partner, then a + b goes to the lower lane of each pair and
// a - b to the upper, the operands in the scalar order), spans of 16 and more pair
// whole vectors; other lengths run the scalar kernel. RoPE: sixteen angles at a
// time. Compiled with -ffp-contract=off: no multiply is fused into the add
// that follows it, as on the scalar path.
// GCC 12's AVX-512 intrinsics trip -Wuninitialized once inlined (GCC bug 105593):
// silenced for the header's lines, as in simd_avx512.hpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>

#include "kernels/cpu/row_transforms_paths.hpp"

namespace vc::cpu {

namespace {

// One in-vector butterfly pass of span h = 1 << K: each lane gets its partner (lane
// j ^ h) by an in-lane permute (h = 1, 2) or a 128-bit lane shuffle (h = 4, 8); the
// lower lane of a pair keeps a + b, the upper a - b (its partner minus itself), the
// operands in the scalar order.
template <int K>
inline __m512 butterfly(__m512 x) {
  __m512 p;
  if constexpr (K == 0) p = _mm512_permute_ps(x, 0xB1);                  // 1 0 3 2
  else if constexpr (K == 1) p = _mm512_permute_ps(x, 0x4E);             // 2 3 0 1
  else if constexpr (K == 2) p = _mm512_shuffle_f32x4(x, x, 0xB1);       // 128-bit pairs
  else p = _mm512_shuffle_f32x4(x, x, 0x4E);                             // 256-bit halves
  constexpr __mmask16 upper = K == 0 ? 0xAAAA : K == 1 ? 0xCCCC : K == 2 ? 0xF0F0 : 0xFF00;
  return _mm512_mask_sub_ps(_mm512_add_ps(x, p), upper, p, x);
}

// One row of N vectors (16 N floats), held in registers through every pass.
template <size_t N>
void hadamard_row(float* row, __m512 scale) {
  __m512 v[N];
  for (size_t i = 0; i < N; ++i)
    v[i] = butterfly<3>(butterfly<2>(butterfly<1>(butterfly<0>(_mm512_loadu_ps(row + 16 * i)))));
  for (size_t h = 1; h < N; h *= 2)  // spans of 16 h floats: whole vectors
    for (size_t i = 0; i < N; i += 2 * h)
      for (size_t j = i; j < i + h; ++j) {
        const __m512 a = v[j], b = v[j + h];
        v[j] = _mm512_add_ps(a, b);
        v[j + h] = _mm512_sub_ps(a, b);
      }
  for (size_t i = 0; i < N; ++i) _mm512_storeu_ps(row + 16 * i, _mm512_mul_ps(v[i], scale));
}

template <size_t N>
void hadamard_rows_n(float* x, size_t rows, __m512 scale) {
  for (size_t r = 0; r < rows; ++r) hadamard_row<N>(x + r * 16 * N, scale);
}

}  // namespace

void hadamard_rows_avx512(float* x, size_t rows, size_t d) {
  const __m512 s = _mm512_set1_ps(float(1.0 / std::sqrt(double(d))));
  switch (d) {  // rows of up to 256 floats stay in registers
    case 16: return hadamard_rows_n<1>(x, rows, s);
    case 32: return hadamard_rows_n<2>(x, rows, s);
    case 64: return hadamard_rows_n<4>(x, rows, s);
    case 128: return hadamard_rows_n<8>(x, rows, s);
    case 256: return hadamard_rows_n<16>(x, rows, s);
    default: break;
  }
  hadamard_rows_scalar(x, rows, d);
}

void rope_row_avx512(float* x, size_t d, const float* cs, float sign) {
  const size_t h = d / 2;
  size_t i = 0;
  const __m512 vsign = _mm512_set1_ps(sign);
  for (; i + 16 <= h; i += 16) {
    const __m512 c = _mm512_loadu_ps(cs + i);
    const __m512 sn = _mm512_mul_ps(vsign, _mm512_loadu_ps(cs + h + i));
    const __m512 x1 = _mm512_loadu_ps(x + i), x2 = _mm512_loadu_ps(x + i + h);
    _mm512_storeu_ps(x + i, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, sn)));
    _mm512_storeu_ps(x + i + h, _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, sn)));
  }
  for (; i < h; ++i) {
    const float c = cs[i], s = sign * cs[h + i];
    const float x1 = x[i], x2 = x[i + h];
    x[i] = x1 * c - x2 * s;
    x[i + h] = x2 * c + x1 * s;
  }
}

}  // namespace vc::cpu

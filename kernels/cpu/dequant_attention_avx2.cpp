// Attention over quantized rows for the avx2 path: eight codes per vector unpacked
// by a byte shuffle and per-lane shifts (dequant_unpack_avx2.hpp, as
// dequantize_rows does; up to 4 bits, a broadcast word and per-lane shifts), then
// the generic kernel of dequant_attention_kernel.hpp with Avx2Simd.
#include "kernels/cpu/simd_avx2.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/dequant_attention_kernel.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx2.hpp"

#include <cstring>

namespace vc::cpu {
namespace {

struct Avx2Codes {
  __m256i shuffle, shift, mask;
  size_t hi_byte, bits;
  const uint8_t* codes;
  explicit Avx2Codes(const QuantSideBlock& s) {
    const Unpack8& u = unpack8(s.bits);
    shuffle = u.shuffle;
    shift = u.shift;
    mask = u.mask;
    hi_byte = u.hi_byte;
    bits = size_t(s.bits);
    codes = s.codes;
  }
  // Every vector of the block's c rows: row starts and widths on multiples of 8
  // codes, and the last vector's loads inside the buffer.
  static bool block_fast(const QuantSideBlock& s, size_t D, size_t c) {
    if (s.first % 8 != 0 || D % 8 != 0 || c == 0) return false;
    const size_t last = s.first + (c - 1) * D + D - 8;
    return last / 8 * size_t(s.bits) + unpack8(s.bits).reach <= s.codes_bytes;
  }
  [[nodiscard]] __m256 unpack(size_t i) const {
    const uint8_t* p = codes + i / 8 * bits;
    return codes8<false>(shuffle, shift, mask, hi_byte, p);  // up to 8 bits, hi_byte is 0
  }
};

// Up to 4 bits, eight codes starting on a byte fill at most one 32-bit word: one
// broadcast load and a per-lane shift (4 instructions where the shuffle takes 7;
// KIVI's and RotateKV's usual widths). The same codes, so the same floats.
struct Avx2Codes4 {
  __m256i shift, mask;
  size_t bits;
  const uint8_t* codes;
  explicit Avx2Codes4(const QuantSideBlock& s) {
    bits = size_t(s.bits);
    const int b = s.bits;
    shift = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
    mask = _mm256_set1_epi32(int32_t((1u << b) - 1u));
    codes = s.codes;
  }
  static bool block_fast(const QuantSideBlock& s, size_t D, size_t c) {
    if (s.bits > 4 || s.first % 8 != 0 || D % 8 != 0 || c == 0) return false;
    const size_t last = s.first + (c - 1) * D + D - 8;
    return last / 8 * size_t(s.bits) + 4 <= s.codes_bytes;
  }
  [[nodiscard]] __m256 unpack(size_t i) const {
    uint32_t w;
    std::memcpy(&w, codes + i / 8 * bits, sizeof w);
    const __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int32_t(w)), shift), mask);
    return _mm256_cvtepi32_ps(v);
  }
};

}  // namespace

void dequant_attention_block_avx2(size_t n_heads, size_t D, size_t bt, size_t c,
                                  const QuantSideBlock& k, const QuantSideBlock& v, float* state,
                                  float* sc) {
  if (Avx2Codes4::block_fast(k, D, c) && Avx2Codes4::block_fast(v, D, c))
    dequant_attention_block_path<Avx2Simd, Avx2Codes4>(n_heads, D, bt, c, k, v, state, sc);
  else
    dequant_attention_block_path<Avx2Simd, Avx2Codes>(n_heads, D, bt, c, k, v, state, sc);
}

void dequant_attention_block_v_avx2(size_t n_heads, size_t D, size_t bt, size_t c,
                                    const float* k, const QuantSideBlock& v, float* state,
                                    float* sc) {
  if (Avx2Codes4::block_fast(v, D, c))
    dequant_attention_block_v_path<Avx2Simd, Avx2Codes4>(n_heads, D, bt, c, k, v, state, sc);
  else
    dequant_attention_block_v_path<Avx2Simd, Avx2Codes>(n_heads, D, bt, c, k, v, state, sc);
}

}  // namespace vc::cpu

// Attention over quantized rows for the avx512 path: sixteen codes per vector
// unpacked by a byte shuffle and per-lane shifts, from one broadcast load up to 8
// bits (dequant_unpack_avx512.hpp, as dequantize_rows does), then the generic
// kernel of dequant_attention_kernel.hpp with Avx512Simd.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/dequant_attention_kernel.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx512.hpp"

namespace vc::cpu {
namespace {

template <bool kNarrow>  // up to 8 bits (Unpack16::narrow)
struct Avx512Codes {
  __m512i shuffle, shift, mask;
  size_t lane_byte[4];
  size_t bits;
  const uint8_t* codes;
  explicit Avx512Codes(const QuantSideBlock& s) {
    const Unpack16& u = unpack16(s.bits);
    shuffle = u.shuffle;
    shift = u.shift;
    mask = u.mask;
    for (size_t l = 0; l < 4; ++l) lane_byte[l] = u.lane_byte[l];
    bits = size_t(s.bits);
    codes = s.codes;
  }
  // Every vector of the block's c rows: row starts and widths on multiples of 8
  // codes, and the last vector's loads inside the buffer.
  static bool block_fast(const QuantSideBlock& s, size_t D, size_t c) {
    if (s.first % 8 != 0 || D % 16 != 0 || c == 0) return false;
    const size_t last = s.first + (c - 1) * D + D - 16;
    return last / 8 * size_t(s.bits) + unpack16(s.bits).reach <= s.codes_bytes;
  }
  [[nodiscard]] __m512 unpack(size_t i) const {
    if constexpr (kNarrow) return codes16_narrow(shuffle, shift, mask, codes + i / 8 * bits);
    return codes16(shuffle, shift, mask, lane_byte, codes + i / 8 * bits);
  }
};

}  // namespace

void dequant_attention_block_avx512(size_t n_heads, size_t D, size_t bt, size_t c,
                                    const QuantSideBlock& k, const QuantSideBlock& v,
                                    float* state, float* sc) {
  if (unpack16(k.bits).narrow && unpack16(v.bits).narrow)
    dequant_attention_block_path<Avx512Simd, Avx512Codes<true>>(n_heads, D, bt, c, k, v, state, sc);
  else  // the wide unpack reads narrow codes too
    dequant_attention_block_path<Avx512Simd, Avx512Codes<false>>(n_heads, D, bt, c, k, v, state, sc);
}

void dequant_attention_block_v_avx512(size_t n_heads, size_t D, size_t bt, size_t c,
                                      const float* k, const QuantSideBlock& v, float* state,
                                      float* sc) {
  if (unpack16(v.bits).narrow)
    dequant_attention_block_v_path<Avx512Simd, Avx512Codes<true>>(n_heads, D, bt, c, k, v, state, sc);
  else
    dequant_attention_block_v_path<Avx512Simd, Avx512Codes<false>>(n_heads, D, bt, c, k, v, state, sc);
}

}  // namespace vc::cpu

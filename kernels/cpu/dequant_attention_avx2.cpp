// Attention over quantized rows for the avx2 path: eight codes per vector unpacked
// by a byte shuffle and per-lane shifts (dequant_unpack_avx2.hpp, as
// dequantize_rows does), then the generic kernel of dequant_attention_kernel.hpp
// with Avx2Simd.
#include "kernels/cpu/simd_avx2.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/dequant_attention_kernel.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx2.hpp"

namespace vc::cpu {
namespace {

struct Avx2Codes {
  __m256i shuffle, shift, mask;
  size_t hi_byte, bits, limit;  // limit: a vector's first byte must be below it
  bool narrow;
  const uint8_t* codes;
  explicit Avx2Codes(const QuantSideBlock& s) {
    const Unpack8& u = unpack8(s.bits);
    shuffle = u.shuffle;
    shift = u.shift;
    mask = u.mask;
    hi_byte = u.hi_byte;
    bits = size_t(s.bits);
    limit = s.codes_bytes >= u.reach ? s.codes_bytes - u.reach + 1 : 0;
    narrow = s.bits <= 8;
    codes = s.codes;
  }
  [[nodiscard]] bool fast(size_t i) const { return i % 8 == 0 && i / 8 * bits < limit; }
  [[nodiscard]] __m256 unpack(size_t i) const {
    const uint8_t* p = codes + i / 8 * bits;
    return narrow ? codes8<true>(shuffle, shift, mask, hi_byte, p)
                  : codes8<false>(shuffle, shift, mask, hi_byte, p);
  }
};

}  // namespace

void dequant_attention_block_avx2(size_t n_heads, size_t D, size_t bt, size_t c,
                                  const QuantSideBlock& k, const QuantSideBlock& v, float* state,
                                  float* sc) {
  dequant_attention_block_path<Avx2Simd, Avx2Codes>(n_heads, D, bt, c, k, v, state, sc);
}

}  // namespace vc::cpu

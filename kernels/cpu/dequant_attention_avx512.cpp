// Attention over quantized rows for the avx512 path: sixteen codes per vector
// unpacked by a byte shuffle and per-lane shifts (dequant_unpack_avx512.hpp, as
// dequantize_rows does), then the generic kernel of dequant_attention_kernel.hpp
// with Avx512Simd.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/dequant_attention_kernel.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/cpu/dequant_unpack_avx512.hpp"

namespace vc::cpu {
namespace {

struct Avx512Codes {
  __m512i shuffle, shift, mask;
  size_t lane_byte[4];
  size_t bits, limit;  // limit: a vector's first byte must be below it
  const uint8_t* codes;
  explicit Avx512Codes(const QuantSideBlock& s) {
    const Unpack16& u = unpack16(s.bits);
    shuffle = u.shuffle;
    shift = u.shift;
    mask = u.mask;
    for (size_t l = 0; l < 4; ++l) lane_byte[l] = u.lane_byte[l];
    bits = size_t(s.bits);
    limit = s.codes_bytes >= u.reach ? s.codes_bytes - u.reach + 1 : 0;
    codes = s.codes;
  }
  [[nodiscard]] bool fast(size_t i) const { return i % 8 == 0 && i / 8 * bits < limit; }
  [[nodiscard]] __m512 unpack(size_t i) const {
    return codes16(shuffle, shift, mask, lane_byte, codes + i / 8 * bits);
  }
};

}  // namespace

void dequant_attention_block_avx512(size_t n_heads, size_t D, size_t bt, size_t c,
                                    const QuantSideBlock& k, const QuantSideBlock& v,
                                    float* state, float* sc) {
  dequant_attention_block_path<Avx512Simd, Avx512Codes>(n_heads, D, bt, c, k, v, state, sc);
}

}  // namespace vc::cpu

// Attention over quantized rows for the scalar path (baseline x86-64): each code is
// read on its own (dequant_code_at), then the generic kernel of
// dequant_attention_kernel.hpp with ScalarSimd.
#include "kernels/cpu/simd_scalar.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/dequant_attention_kernel.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"

namespace vc::cpu {
namespace {

// No vector unpacking: every code goes through QuantRowsSrc's per-lane loop.
struct ScalarCodes {
  explicit ScalarCodes(const QuantSideBlock&) {}
  static bool block_fast(const QuantSideBlock&, size_t, size_t) { return false; }
  [[nodiscard]] ScalarSimd::V unpack(size_t) const { return ScalarSimd::zero(); }
};

}  // namespace

void dequant_attention_block_scalar(size_t n_heads, size_t D, size_t bt, size_t c,
                                    const QuantSideBlock& k, const QuantSideBlock& v,
                                    float* state, float* sc) {
  dequant_attention_block_path<ScalarSimd, ScalarCodes>(n_heads, D, bt, c, k, v, state, sc);
}

void dequant_attention_block_v_scalar(size_t n_heads, size_t D, size_t bt, size_t c,
                                      const float* k, const QuantSideBlock& v, float* state,
                                      float* sc) {
  dequant_attention_block_v_path<ScalarSimd, ScalarCodes>(n_heads, D, bt, c, k, v, state, sc);
}

}  // namespace vc::cpu

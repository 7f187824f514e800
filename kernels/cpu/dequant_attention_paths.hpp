// Internal: the per-SIMD-path kernels of attention over quantized rows
// (dequant_attention.hpp), dispatched by AttentionRowState::add_quantized after it
// checks the arguments. See dequant_attention_kernel.hpp for the arithmetic.
#pragma once
#include <cstddef>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/dequant_attention.hpp"

namespace vc::cpu {

/// Merges one block of c valid rows (block_tokens bt, head_dim D) into `state`, a
/// running state of n_heads query heads on one KV head (attention_state_floats
/// layout); `sc`: kAttentionMaxHeadsPerPass * padded bt floats of scratch.
using DequantAttnFn = void (*)(size_t n_heads, size_t D, size_t bt, size_t c,
                               const QuantSideBlock& k, const QuantSideBlock& v, float* state,
                               float* sc);
void dequant_attention_block_scalar(size_t, size_t, size_t, size_t, const QuantSideBlock&,
                                    const QuantSideBlock&, float*, float*);
void dequant_attention_block_avx2(size_t, size_t, size_t, size_t, const QuantSideBlock&,
                                  const QuantSideBlock&, float*, float*);
void dequant_attention_block_avx512(size_t, size_t, size_t, size_t, const QuantSideBlock&,
                                    const QuantSideBlock&, float*, float*);

/// The same with the block's K rows given as fp32 ([c][D]) and only V from codes.
using DequantAttnVFn = void (*)(size_t n_heads, size_t D, size_t bt, size_t c, const float* k,
                                const QuantSideBlock& v, float* state, float* sc);
void dequant_attention_block_v_scalar(size_t, size_t, size_t, size_t, const float*,
                                      const QuantSideBlock&, float*, float*);
void dequant_attention_block_v_avx2(size_t, size_t, size_t, size_t, const float*,
                                    const QuantSideBlock&, float*, float*);
void dequant_attention_block_v_avx512(size_t, size_t, size_t, size_t, const float*,
                                      const QuantSideBlock&, float*, float*);

}  // namespace vc::cpu

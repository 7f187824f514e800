// Internal: the per-SIMD-path attention entry points that kernels/cpu/attention.cpp
// dispatches to (after validating the arguments). See attention_kernel.hpp for the
// arithmetic.
#pragma once
#include <cstddef>

#include "kernels/cpu/attention.hpp"

namespace vc::cpu {

/// Most query heads any path processes in one pass over a KV block.
constexpr size_t kAttentionMaxHeadsPerPass = 4;

/// Scratch floats the path functions need: per query head a zero-padded scaled
/// query, a running output and (max, sum); one block of scores per pass-head.
[[nodiscard]] constexpr size_t attention_scratch_floats(size_t n_heads, size_t head_dim,
                                                        size_t block_tokens) {
  const size_t dp = (head_dim + 15) / 16 * 16, bp = (block_tokens + 15) / 16 * 16;
  return n_heads * (2 * dp + 2) + kAttentionMaxHeadsPerPass * bp;
}

/// attention_row for one path, KV heads [g_begin, g_end) (with all their query
/// heads); arguments already validated, n_ctx > 0.
void attention_scalar(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end);
void attention_avx2(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                    float scale, float* out, float* scratch, size_t g_begin, size_t g_end);
void attention_avx512(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end);

}  // namespace vc::cpu

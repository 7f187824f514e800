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

/// Floats of one row's running state: per query head a zero-padded scaled query, a
/// running output and (max, sum).
[[nodiscard]] constexpr size_t attention_state_floats(size_t n_heads, size_t head_dim) {
  return n_heads * (2 * ((head_dim + 15) / 16 * 16) + 2);
}

/// A fresh state for the query heads of KV heads [g_begin, g_end): scaled,
/// zero-padded queries, zero outputs, max -inf, sum 0.
inline void attention_state_init(const float* q, size_t n_heads, size_t kv_heads, size_t head_dim,
                                 float scale, float* state, size_t g_begin, size_t g_end) {
  const size_t dp = (head_dim + 15) / 16 * 16, group = n_heads / kv_heads;
  float* qs = state;
  float* o = state + n_heads * dp;
  float* stats = state + 2 * n_heads * dp;
  for (size_t h = g_begin * group; h < g_end * group; ++h) {
    for (size_t d = 0; d < dp; ++d) {
      qs[h * dp + d] = d < head_dim ? q[h * head_dim + d] * scale : 0.f;
      o[h * dp + d] = 0.f;
    }
    stats[2 * h] = -__builtin_inff();
    stats[2 * h + 1] = 0.f;
  }
}

/// attention_row for one path, KV heads [g_begin, g_end) (with all their query
/// heads); arguments already validated, n_ctx > 0.
void attention_scalar(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end);
void attention_avx2(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                    float scale, float* out, float* scratch, size_t g_begin, size_t g_end);
void attention_avx512(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end);

/// One path's pieces of a row split over calls (AttentionRowState): merge blocks
/// [j_begin, j_end) into `state`; `sc`: kAttentionMaxHeadsPerPass * padded
/// block_tokens floats of scratch. Then the division into `out`.
using AttnBlocksFn = void (*)(size_t n_heads, const PagedKv& kv, size_t n_ctx, size_t j_begin,
                              size_t j_end, float* state, float* sc, size_t g_begin, size_t g_end);
using AttnFinishFn = void (*)(size_t n_heads, size_t kv_heads, size_t head_dim,
                              const float* state, float* out, size_t g_begin, size_t g_end);
void attention_blocks_scalar(size_t, const PagedKv&, size_t, size_t, size_t, float*, float*, size_t, size_t);
void attention_blocks_avx2(size_t, const PagedKv&, size_t, size_t, size_t, float*, float*, size_t, size_t);
void attention_blocks_avx512(size_t, const PagedKv&, size_t, size_t, size_t, float*, float*, size_t, size_t);
void attention_finish_scalar(size_t, size_t, size_t, const float*, float*, size_t, size_t);
void attention_finish_avx2(size_t, size_t, size_t, const float*, float*, size_t, size_t);
void attention_finish_avx512(size_t, size_t, size_t, const float*, float*, size_t, size_t);

/// One path's AttentionRowState::add_rows over blocks [j_begin, j_end), whole for
/// every row: n_rows states (attention_state_floats each) of one sequence's rows.
using AttnRowsBlocksFn = void (*)(size_t n_heads, const PagedKv& kv, size_t j_begin,
                                  size_t j_end, float* const* states, size_t n_rows, float* sc);
void attention_rows_blocks_scalar(size_t, const PagedKv&, size_t, size_t, float* const*, size_t, float*);
void attention_rows_blocks_avx2(size_t, const PagedKv&, size_t, size_t, float* const*, size_t, float*);
void attention_rows_blocks_avx512(size_t, const PagedKv&, size_t, size_t, float* const*, size_t, float*);
/// Query heads per pass of each path (its traits' HB).
constexpr size_t kAttentionHeadsPerPassScalar = 2, kAttentionHeadsPerPassAvx2 = 2,
                 kAttentionHeadsPerPassAvx512 = 4;

/// For tests of the AVX-512 score reduction (CPUs with AVX-512 only): `in` is 16
/// vectors of 16 floats; wide[n] is vector n's sum as reduce16 gives it, narrow[n]
/// as reduce4 does.
void score_sums_avx512(const float* in, float* wide, float* narrow);

/// accumulate_attention_transposed (attention_scores.hpp) for one path, over the
/// key groups [grp_begin, grp_end) (attention_accumulate_kernel.hpp).
using AccumulateFn = void (*)(const float* q, size_t ldq, size_t rows, const float* kt, size_t D,
                              size_t ncols, const size_t* len, const float* row_max,
                              const float* row_inv_sum, float* acc, size_t grp_begin,
                              size_t grp_end);
void accumulate_attention_scalar(const float*, size_t, size_t, const float*, size_t, size_t,
                                 const size_t*, const float*, const float*, float*, size_t, size_t);
void accumulate_attention_avx2(const float*, size_t, size_t, const float*, size_t, size_t,
                               const size_t*, const float*, const float*, float*, size_t, size_t);
void accumulate_attention_avx512(const float*, size_t, size_t, const float*, size_t, size_t,
                                 const size_t*, const float*, const float*, float*, size_t, size_t);

}  // namespace vc::cpu

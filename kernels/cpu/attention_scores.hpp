// Dot products of many query rows with one KV head's keys, for prefill statistics
// (accumulated attention): the keys are read from the paged layer a block at a time,
// transposed once, and used for every row, so the dimensions are summed along SIMD
// lanes of keys with no horizontal reduction per score.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace vc::cpu {

/// s[i, t] = q_i · k_t for i < rows and t < ncols, where q_i = q + i * ldq (head_dim
/// floats) and k_t is position t of KV head `g` of `kv` (any dtype, converted
/// exactly to fp32). Each score sums the dimensions in order 0..head_dim-1, one
/// multiply-add each, so it depends only on q_i and k_t: not on rows, ncols, the
/// block it falls in or `pool` (which may be nullptr). s: [rows, ncols].
void score_rows(const float* q, size_t ldq, size_t rows, const PagedKv& kv, size_t g,
                size_t ncols, float* s, ThreadPool* pool);

/// The keys score_rows reads, transposed once for many calls: positions [0, ncols)
/// of KV head g, in groups of 16 positions, each group [head_dim][16] fp32 (zero
/// past ncols). kt is resized to transposed_keys_size(ncols, head_dim).
void transpose_keys(const PagedKv& kv, size_t g, size_t ncols, std::vector<float>& kt,
                    ThreadPool* pool);
[[nodiscard]] size_t transposed_keys_size(size_t ncols, size_t head_dim);

/// score_rows over keys transposed by transpose_keys (of at least ncols positions,
/// head_dim D): the same bits.
void score_rows_transposed(const float* q, size_t ldq, size_t rows, const float* kt, size_t D,
                           size_t ncols, float* s, ThreadPool* pool);

/// Accumulated attention without a score matrix: for t < ncols,
///   acc[t] += sum over rows i with t < len[i], in row order, of
///             exp(min(q_i · k_t - row_max[i], 0)) * row_inv_sum[i]
/// where q_i = q + i * ldq is already scaled, kt the keys transposed by
/// transpose_keys, and row_max / row_inv_sum the softmax maximum and 1 / sum of row
/// i's scores (the attention kernel's own: AttentionRowState::max_sum). Scores stay
/// in registers (attention_accumulate_kernel.hpp); each thread of `pool` owns whole
/// groups of 16 keys and each acc[t] is summed in row order, so the bits depend on
/// neither the pool nor how rows are split over calls (per SIMD path).
void accumulate_attention_transposed(const float* q, size_t ldq, size_t rows, const float* kt,
                                     size_t D, size_t ncols, const size_t* len,
                                     const float* row_max, const float* row_inv_sum, float* acc,
                                     ThreadPool* pool);

}  // namespace vc::cpu

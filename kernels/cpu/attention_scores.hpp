// Dot products of many query rows with one KV head's keys, for prefill statistics
// (accumulated attention): the keys are read from the paged layer a block at a time,
// transposed once, and used for every row, so the dimensions are summed along SIMD
// lanes of keys with no horizontal reduction per score.
#pragma once
#include <cstddef>

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

}  // namespace vc::cpu

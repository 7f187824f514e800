// Causal attention of one query row over a paged KV cache (GQA).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {

/// One layer's paged KV as raw pointers.
/// k, v: [num_blocks, kv_heads, block_tokens, head_dim] in `dtype`.
/// block_table[j]: physical block of logical block j (positions j*block_tokens ..).
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  size_t block_tokens = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  const int32_t* block_table = nullptr;
};

/// out[h, :] = softmax(scale * q[h] · K[kvh, 0..n_ctx)) · V[kvh, 0..n_ctx) for each
/// query head h < n_heads, with kvh = h / (n_heads / kv_heads).
/// q, out: [n_heads, head_dim] fp32.
///
/// Batch invariance: the result depends only on q and the first n_ctx positions of
/// the cache. The reduction over positions runs in chunks fixed by absolute position
/// (one chunk per KV block), each chunk's (max, sum, weighted V) merged in position
/// order with the online-softmax rule, so it never depends on how many query rows
/// are computed in the same pass.
void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out);

/// As above, with the KV heads (each with its query heads) split across `pool`
/// threads when the context is long enough to pay for the hand-off; bit-identical
/// to the single-threaded call. `pool` may be nullptr.
void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out, ThreadPool* pool);

}  // namespace vc::cpu

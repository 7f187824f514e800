// The drafter's attention on the GPU, the CUDA counterpart of
// vc::cpu::attention_row_mixed: each row attends, per KV head g, to that head's
// compressed prefix (the rows a token-dropping compressor kept, stored as rows) and
// then to the row's recent tail in the paged cache, positions [tail_begin, n_ctx):
//   out[m, h] = softmax(scale * q[m, h] · k_e) · v_e over those entries e, g = h / group.
// Drafts are verified, so this need not be batch invariant; it is deterministic (the
// same reductions as launch_attention_rows: chunks of entries merged in order).
// Quantized views (KIVI, KVQuant, RotateKV codes) are not read here yet: their rows
// must be decoded to the KV type first.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// The compressed prefixes and paged tails of M rows (device pointers except
/// max_entries). Prefix rows and the paged cache hold the same `dtype`.
struct MixedKvRows {
  const void* const* prefix_k = nullptr;  // [M * kv_heads] -> [count, head_dim] rows
  const void* const* prefix_v = nullptr;  // same
  const int32_t* prefix_count = nullptr;  // [M * kv_heads]: rows kept for (row, head)
  const void* k = nullptr;  // paged tail: [num_blocks, kv_heads, block_tokens, head_dim]
  const void* v = nullptr;
  DType dtype = DType::bf16;
  size_t block_tokens = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;                    // even, at most kAttentionMaxHeadDim
  const int32_t* block_tables = nullptr;  // [M, table_stride]: logical -> physical block
  size_t table_stride = 0;
  const int32_t* tail_begin = nullptr;  // [M]: first tail position (the view covers below)
  const int32_t* n_ctx = nullptr;       // [M]: positions the row attends to (its position + 1)
  size_t max_entries = 0;  // host value >= count + n_ctx - tail_begin of every row and head
};

/// Floats of device workspace launch_attention_rows_mixed needs.
[[nodiscard]] size_t attention_mixed_workspace_floats(size_t M, size_t n_heads, size_t head_dim,
                                                      size_t max_entries);

/// Launches on `stream` (asynchronous). q, out: [M, n_heads, head_dim] f32 (device).
/// A (row, head) with no entry gets zeros. Returns cudaErrorInvalidValue for a shape
/// the kernel does not take (as launch_attention_rows) or a too small workspace.
cudaError_t launch_attention_rows_mixed(const float* q, size_t M, size_t n_heads,
                                        const MixedKvRows& kv, float scale, float* out,
                                        float* workspace, size_t workspace_floats,
                                        cudaStream_t stream);

}  // namespace vc::cuda

// Paged attention of decode and verify rows on the GPU, the CUDA counterpart of
// vc::cpu::attention_row (GQA, causal through each row's context length):
//   out[m, h, :] = softmax(scale * q[m, h] · K[g, 0..n_ctx[m])) · V[g, 0..n_ctx[m]),
//   g = h / (n_heads / kv_heads),
// over the block table layout of PagedKvCache: k, v [num_blocks, kv_heads,
// block_tokens, head_dim], logical block j of row m at physical block
// block_tables[m * table_stride + j].
//
// Batch invariance (DESIGN.md, exactness contract 1): a row's positions are split
// into chunks fixed by absolute position (attention_chunk_positions(block_tokens)
// positions each, whole KV blocks), each chunk reduced to (max, sum, weighted V) in
// one fixed order that depends only on the chunk's valid positions, and the chunks
// merged in position order with the online-softmax rule, as the CPU merges its
// blocks. Nothing depends on M, on the other rows of the pass, or on how many
// chunks run at once: a row alone gives the bits of the same row in any batch.
// The chunking differs from the CPU's (one chunk per block) and the exp is the
// CPU's approximation, so GPU and CPU agree to about 1e-6 relative, not bit for bit.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// The KV of one layer and the rows that attend to it (all device pointers except
/// max_ctx).
struct PagedKvRows {
  const void* k = nullptr;  // [num_blocks, kv_heads, block_tokens, head_dim] in dtype
  const void* v = nullptr;  // same layout
  DType dtype = DType::bf16;
  size_t block_tokens = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;                    // even, at most kAttentionMaxHeadDim
  const int32_t* block_tables = nullptr;  // [M, table_stride]: logical -> physical block
  size_t table_stride = 0;
  const int32_t* n_ctx = nullptr;  // [M]: positions row m attends to (its position + 1)
  size_t max_ctx = 0;              // host value >= every n_ctx: sizes grid and workspace (a row
                                   // past it attends to its first max_ctx-covering chunks only)
};

/// Largest head_dim the kernel takes.
constexpr size_t kAttentionMaxHeadDim = 256;

/// Positions per chunk for a block size: whole blocks, about 256 positions. A
/// function of block_tokens alone, so every pass over the same cache splits alike.
[[nodiscard]] constexpr size_t attention_chunk_positions(size_t block_tokens) {
  return block_tokens >= 256 ? block_tokens : (256 / block_tokens) * block_tokens;
}

/// Floats of device workspace launch_attention_rows needs for M rows.
[[nodiscard]] constexpr size_t attention_workspace_floats(size_t M, size_t n_heads, size_t head_dim,
                                                          size_t block_tokens, size_t max_ctx) {
  const size_t chunk = attention_chunk_positions(block_tokens == 0 ? 1 : block_tokens);
  const size_t chunks = (max_ctx + chunk - 1) / chunk;
  return M * n_heads * chunks * (head_dim + 2);
}

/// Launches on `stream` (asynchronous). q, out: [M, n_heads, head_dim] f32 (device);
/// workspace: at least attention_workspace_floats(...) floats (device), private to
/// this launch until it completes. A row with n_ctx == 0 gets zeros. Returns
/// cudaErrorInvalidValue for a shape the kernel does not take (n_heads not a multiple
/// of kv_heads, odd or too large head_dim, block_tokens 0, workspace too small, the
/// chunk's scores not fitting in shared memory), else the launch status.
cudaError_t launch_attention_rows(const float* q, size_t M, size_t n_heads, const PagedKvRows& kv,
                                  float scale, float* out, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream);

/// launch_attention_rows in two parts, for KV that arrives chunk by chunk: the
/// chunks [j0, j1) of attention_chunk_positions(block_tokens) positions (those a row
/// attends to), each reduced into the workspace as launch_attention_rows reduces it
/// (the same bits: a chunk's reduction depends on its positions alone), reading only
/// the blocks of those chunks through kv.block_tables; then, once every chunk has
/// run, the merge in position order into out. q is read by every chunks launch; the
/// workspace is the rows' for the whole sequence. Same errors as
/// launch_attention_rows.
cudaError_t launch_attention_chunks(const float* q, size_t M, size_t n_heads, const PagedKvRows& kv,
                                    float scale, float* workspace, size_t workspace_floats,
                                    size_t j0, size_t j1, cudaStream_t stream);
cudaError_t launch_attention_merge(size_t M, size_t n_heads, const PagedKvRows& kv, float* out,
                                   const float* workspace, size_t workspace_floats,
                                   cudaStream_t stream);

}  // namespace vc::cuda

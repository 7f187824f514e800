// The drafter's attention on the GPU, the CUDA counterpart of
// vc::cpu::attention_row_mixed: each row attends, per KV head g, to that head's
// compressed prefix (the rows a token-dropping compressor kept, stored as rows) and
// then to the row's recent tail in the paged cache, positions [tail_begin, n_ctx):
//   out[m, h] = softmax(scale * q[m, h] · k_e) · v_e over those entries e, g = h / group.
// Drafts are verified, so this need not be batch invariant; it is deterministic (the
// same reductions as launch_attention_rows: chunks of entries merged in order).
// A prefix may instead be held quantized (KIVI, KVQuant, RotateKV: QuantPrefixSide,
// as the CPU's compressed tier packs it): its codes are dequantized inside the
// kernel, a few dozen rows at a time into shared memory, with the outliers, RoPE or
// Hadamard transform the CPU's decode applies, right before they are attended to.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// One side (K or V) of a quantized prefix of n rows (vc::PackedSide on the CPU;
/// device pointers): rows [0, rows) are codes of `bits` bits (1..16; packed densely,
/// least significant bit first, row-major; codes_bytes bytes) in blocks of
/// block_rows x block_cols tiled from (0, 0), block order row-major, each with an
/// fp16 zero and scale: value = zero + code * scale (the multiply and the add
/// rounded separately); rows [rows, n) are bf16 (`full`). Then each outlier
/// (ascending element indices r * head_dim + c, bf16 values) replaces its element,
/// and the row gets its transform: rotate-half RoPE at positions[r] from rope_table
/// ([position][cos head_dim/2][sin head_dim/2] floats: vc::cpu::rope_table's rows,
/// the arithmetic of vc::cpu::rope_row), or the normalised Walsh-Hadamard transform
/// (vc::cpu::hadamard_rows; head_dim a power of two).
struct QuantPrefixSide {
  const uint8_t* codes = nullptr;  // null: this side (and head) is not quantized
  size_t codes_bytes = 0;
  int bits = 0;
  size_t rows = 0;
  size_t block_rows = 1, block_cols = 1;
  const uint16_t* zero = nullptr;   // fp16 bits, one per block
  const uint16_t* scale = nullptr;  // fp16 bits, one per block
  const uint16_t* full = nullptr;   // bf16 rows after the quantized ones
  const uint32_t* outliers = nullptr;
  const uint16_t* outlier_values = nullptr;  // bf16 bits
  size_t n_outliers = 0;
  const int32_t* positions = nullptr;  // RoPE: each row's absolute position
  const float* rope_table = nullptr;   // RoPE: null for none
  bool hadamard = false;
};

/// The compressed prefixes and paged tails of M rows (device pointers except
/// max_entries). Prefix rows and the paged cache hold the same `dtype`; a (row, KV
/// head) whose prefix_quant_k entry has codes reads its prefix from prefix_quant_k /
/// prefix_quant_v instead of prefix_k / prefix_v.
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
  const QuantPrefixSide* prefix_quant_k = nullptr;  // [M * kv_heads], or null: none quantized
  const QuantPrefixSide* prefix_quant_v = nullptr;  // same (required with prefix_quant_k)
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

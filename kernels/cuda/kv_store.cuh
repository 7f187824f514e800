// Storing rows' new K and V into a paged KV layout on the GPU, the CUDA counterpart
// of PagedKvCache::write (kvtiers/paged_kv_cache.cpp): row m's [kv_heads, head_dim]
// f32 K and V go to block blocks[m] at offset offsets[m] of a layout
// [num_blocks, kv_heads, block_tokens, head_dim], rounded to the layout's type as
// from_f32 rounds (to nearest even: __float2bfloat16_rn, __float2half_rn), so the
// stored bits equal the host cache's.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// Launches on `stream` (asynchronous). k_rows, v_rows: [M, kv_heads * head_dim] f32;
/// blocks, offsets: [M] (device; a row with block < 0 is skipped); k, v: the layer's
/// K and V in `dt` (device). Returns the launch status (cudaSuccess for M == 0).
cudaError_t launch_kv_store(const float* k_rows, const float* v_rows, size_t M, const int32_t* blocks,
                           const int32_t* offsets, size_t kv_heads, size_t block_tokens, size_t head_dim,
                           DType dt, void* k, void* v, cudaStream_t stream);

}  // namespace vc::cuda

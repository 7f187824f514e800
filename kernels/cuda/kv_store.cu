// Rows' K and V into a paged layout (see kv_store.cuh): one thread block per (row,
// KV head), threads over head_dim.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/kv_store.cuh"

namespace vc::cuda {

template <DType T>
static __global__ void kv_store_kernel(const float* k_rows, const float* v_rows, const int32_t* blocks,
                                       const int32_t* offsets, size_t kv_heads, size_t block_tokens,
                                       size_t head_dim, void* k, void* v) {
  const size_t m = blockIdx.x, h = blockIdx.y;
  const int32_t b = blocks[m];
  if (b < 0) return;
  const size_t src = (m * kv_heads + h) * head_dim;
  const size_t dst = ((size_t(b) * kv_heads + h) * block_tokens + size_t(offsets[m])) * head_dim;
  for (size_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    if constexpr (T == DType::f32) {
      static_cast<float*>(k)[dst + d] = k_rows[src + d];
      static_cast<float*>(v)[dst + d] = v_rows[src + d];
    } else if constexpr (T == DType::bf16) {
      static_cast<__nv_bfloat16*>(k)[dst + d] = __float2bfloat16_rn(k_rows[src + d]);
      static_cast<__nv_bfloat16*>(v)[dst + d] = __float2bfloat16_rn(v_rows[src + d]);
    } else {
      static_cast<__half*>(k)[dst + d] = __float2half_rn(k_rows[src + d]);
      static_cast<__half*>(v)[dst + d] = __float2half_rn(v_rows[src + d]);
    }
  }
}

cudaError_t launch_kv_store(const float* k_rows, const float* v_rows, size_t M, const int32_t* blocks,
                           const int32_t* offsets, size_t kv_heads, size_t block_tokens, size_t head_dim,
                           DType dt, void* k, void* v, cudaStream_t stream) {
  if (M == 0 || kv_heads == 0 || head_dim == 0) return cudaSuccess;
  if (M > 0x7fffffffu || kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid{unsigned(M), unsigned(kv_heads)};
  const unsigned threads = head_dim >= 128 ? 128u : unsigned((head_dim + 31) / 32 * 32);
  switch (dt) {
    case DType::f32:
      kv_store_kernel<DType::f32><<<grid, threads, 0, stream>>>(k_rows, v_rows, blocks, offsets, kv_heads,
                                                                 block_tokens, head_dim, k, v);
      break;
    case DType::bf16:
      kv_store_kernel<DType::bf16><<<grid, threads, 0, stream>>>(k_rows, v_rows, blocks, offsets, kv_heads,
                                                                  block_tokens, head_dim, k, v);
      break;
    case DType::f16:
      kv_store_kernel<DType::f16><<<grid, threads, 0, stream>>>(k_rows, v_rows, blocks, offsets, kv_heads,
                                                                 block_tokens, head_dim, k, v);
      break;
  }
  return cudaGetLastError();
}

}  // namespace vc::cuda

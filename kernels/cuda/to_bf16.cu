// f32 -> bf16 (see to_bf16.cuh): a grid-stride loop of __float2bfloat16_rn, the
// hardware's round to nearest even, which is f32_to_bf16's rule.
#include <cuda_bf16.h>

#include "kernels/cuda/to_bf16.cuh"

namespace vc::cuda {

static __global__ void to_bf16_kernel(const float* x, size_t n, __nv_bfloat16* out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __float2bfloat16_rn(x[i]);
}

cudaError_t launch_to_bf16(const float* x, size_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  const size_t blocks = (n + kThreads - 1) / kThreads;
  to_bf16_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
      x, n, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace vc::cuda

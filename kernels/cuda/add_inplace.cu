// Residual add (see add_inplace.cuh): a grid-stride loop of 16-byte loads (float4)
// when both pointers are 16-byte aligned, the leftover elements one by one.
#include <cstdint>

#include "kernels/cuda/add_inplace.cuh"

namespace vc::cuda {

static __global__ void add_inplace_vec4_kernel(float4* y, const float4* x, size_t n4) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 a = y[i];
    const float4 b = x[i];
    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    y[i] = a;
  }
}

static __global__ void add_inplace_kernel(float* y, const float* x, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] += x[i];
}

cudaError_t launch_add_inplace(float* y, const float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  auto grid_for = [](size_t work) {
    const size_t blocks = (work + kThreads - 1) / kThreads;
    return unsigned(blocks < 65536 ? blocks : 65536);
  };
  const bool aligned = (reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x)) % 16 == 0;
  size_t done = 0;
  if (aligned && n >= 4) {
    const size_t n4 = n / 4;
    add_inplace_vec4_kernel<<<grid_for(n4), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(x), n4);
    done = n4 * 4;
  }
  if (done < n)
    add_inplace_kernel<<<grid_for(n - done), kThreads, 0, stream>>>(y + done, x + done, n - done);
  return cudaGetLastError();
}

}  // namespace vc::cuda

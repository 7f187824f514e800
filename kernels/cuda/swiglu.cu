// SwiGLU (see swiglu.cuh): a grid-stride loop, one element per thread per step;
// memory-bound (12 bytes per element), the arithmetic hides under the loads.
#include "kernels/cuda/exp_approx.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace vc::cuda {

static __global__ void swiglu_kernel(const float* gate, const float* up, float* out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    const float silu = __fdiv_rn(g, __fadd_rn(1.f, exp_approx(__fsub_rn(0.f, g))));
    out[i] = __fmul_rn(silu, up[i]);
  }
}

cudaError_t launch_swiglu(const float* gate, const float* up, float* out, size_t n,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  const size_t blocks = (n + kThreads - 1) / kThreads;
  // Enough blocks to fill any current GPU several times over; the loop does the rest.
  const unsigned grid = unsigned(blocks < 65536 ? blocks : 65536);
  swiglu_kernel<<<grid, kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

}  // namespace vc::cuda

// RoPE (see rope.cuh): one thread block per row m, one thread per frequency i; each
// thread computes its (cos, sin) once in double and rotates pair i of every head of
// the row, so the double-precision work is half a head_dim per row, not per head.
#include "kernels/cuda/rope.cuh"

namespace vc::cuda {

static __global__ void rope_kernel(float* x, size_t n_heads, size_t head_dim,
                                   const int32_t* __restrict__ positions,
                                   const float* __restrict__ inv_freq) {
  const size_t half = head_dim / 2;
  const double pos = double(positions[blockIdx.x]);
  float* row = x + size_t(blockIdx.x) * n_heads * head_dim;
  for (size_t i = threadIdx.x; i < half; i += blockDim.x) {
    double sd, cd;
    sincos(pos * double(inv_freq[i]), &sd, &cd);
    const float c = float(cd), s = float(sd);
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = row + h * head_dim;
      const float x1 = v[i], x2 = v[i + half];
      // Unfused, like the CPU: round each product, then the sum.
      v[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      v[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
  }
}

cudaError_t launch_rope(float* x, size_t M, size_t n_heads, size_t head_dim,
                        const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  if (M == 0 || n_heads == 0 || head_dim < 2) return cudaSuccess;
  if (M > 0x7fffffffu) return cudaErrorInvalidValue;  // gridDim.x limit
  const size_t half = head_dim / 2;
  const unsigned threads = half >= 128 ? 128u : unsigned((half + 31) / 32 * 32);
  rope_kernel<<<unsigned(M), threads, 0, stream>>>(x, n_heads, head_dim, positions, inv_freq);
  return cudaGetLastError();
}

}  // namespace vc::cuda

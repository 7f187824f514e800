// RMSNorm kernel (see rms_norm.cuh): one thread block per row. Each thread sums the
// squares of a strided slice of the row (coalesced loads: neighbouring threads read
// neighbouring floats), the block reduces with warp shuffles (no shared-memory
// round trips inside a warp) and one shared-memory step across warps, then every
// thread scales its slice.
#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace vc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxThreads = 1024;

// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

}  // namespace

template <DType WT>
static __global__ void rms_norm_kernel(const float* x, size_t dim, const void* weight, float eps,
                                       float* out) {
  __shared__ float warp_sums[kMaxThreads / 32];
  const float* xr = x + size_t(blockIdx.x) * dim;
  float* yr = out + size_t(blockIdx.x) * dim;

  float ss = 0.f;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = warp_sum(ss);

  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned n_warps = (blockDim.x + 31u) / 32u;
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float t = lane < n_warps ? warp_sums[lane] : 0.f;
    t = warp_sum(t);
    if (lane == 0) warp_sums[0] = t;
  }
  __syncthreads();

  const float inv = 1.0f / sqrtf(warp_sums[0] / float(dim) + eps);
  // Each thread rewrites only the elements it read: in place (out == x) is safe.
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = (xr[i] * inv) * load_f32<WT>(weight, i);
}

cudaError_t launch_rms_norm(const float* x, size_t M, size_t dim, const void* weight, DType wt,
                            float eps, float* out, cudaStream_t stream) {
  if (M == 0 || dim == 0) return cudaSuccess;
  if (M > 0x7fffffffu) return cudaErrorInvalidValue;  // gridDim.x limit
  // Enough threads for one element each up to 1024, in whole warps.
  const size_t want = dim < size_t(kMaxThreads) ? dim : size_t(kMaxThreads);
  const unsigned threads = unsigned((want + 31) / 32 * 32);
  switch (wt) {
    case DType::f32:
      rms_norm_kernel<DType::f32><<<unsigned(M), threads, 0, stream>>>(x, dim, weight, eps, out);
      break;
    case DType::f16:
      rms_norm_kernel<DType::f16><<<unsigned(M), threads, 0, stream>>>(x, dim, weight, eps, out);
      break;
    case DType::bf16:
      rms_norm_kernel<DType::bf16><<<unsigned(M), threads, 0, stream>>>(x, dim, weight, eps, out);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(const float* x, size_t M, size_t dim, const float* weight, float eps,
                            float* out, cudaStream_t stream) {
  return launch_rms_norm(x, M, dim, weight, DType::f32, eps, out, stream);
}

}  // namespace vc::cuda

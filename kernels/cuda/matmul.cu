// Batch-invariant matmul (see matmul.cuh for the reduction order every element
// follows). One warp per output column n: its 32 lanes read the weight row W[n, :]
// as consecutive 16-byte chunks (a warp reads 512 contiguous bytes per step), four
// steps loaded ahead of their FMAs so that 64 bytes per lane are in flight -- decode
// is bound by HBM bandwidth, and this is what keeps enough reads outstanding. The
// rows of x are read from L1/L2 (they are small and shared by every warp).
#include <cstdint>

#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/matmul.cuh"

namespace vc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;
constexpr int kStepsAhead = 4;  // chunks per lane loaded before their FMAs
constexpr int kRowTile = int(kMatmulRowTile);

// Elements [k0, k0 + 8) of a row; lanes past K (only when !kVec) are 0 and unused.
template <DType T, bool kVec>
__device__ __forceinline__ void load_chunk(const void* row, size_t k0, size_t K, float out[8]) {
  if constexpr (kVec) {
    load8_f32<T>(row, k0, out);
  } else {
    for (int e = 0; e < 8; ++e) out[e] = k0 + e < K ? load_f32<T>(row, k0 + e) : 0.f;
  }
}

}  // namespace

template <DType T, bool kVec>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matmul_kernel(const float* __restrict__ x, size_t M, size_t K, const void* w, size_t N,
                  const float* __restrict__ bias, float* __restrict__ y) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t n = size_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together
  const void* wrow = static_cast<const typename Elem<T>::type*>(w) + n * K;
  const size_t chunks = (K + 7) / 8;

  for (size_t m0 = 0; m0 < M; m0 += kRowTile) {
    const int rows = int(M - m0 < size_t(kRowTile) ? M - m0 : size_t(kRowTile));
    float acc[kRowTile];
    for (int r = 0; r < kRowTile; ++r) acc[r] = 0.f;

    for (size_t c0 = lane; c0 < chunks; c0 += 32 * kStepsAhead) {
      float wv[kStepsAhead][8];
#pragma unroll
      for (int s = 0; s < kStepsAhead; ++s) {
        const size_t c = c0 + size_t(s) * 32;
        if (c < chunks) load_chunk<T, kVec>(wrow, c * 8, K, wv[s]);
      }
#pragma unroll
      for (int s = 0; s < kStepsAhead; ++s) {
        const size_t c = c0 + size_t(s) * 32;
        if (c >= chunks) break;
        const size_t k0 = c * 8;
        const int len = int(K - k0 < 8 ? K - k0 : 8);
#pragma unroll
        for (int r = 0; r < kRowTile; ++r) {
          if (r >= rows) break;
          const float* xr = x + (m0 + size_t(r)) * K;
          float xv[8];
          load_chunk<DType::f32, kVec>(xr, k0, K, xv);
          if (len == 8) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r] = fmaf(xv[e], wv[s][e], acc[r]);
          } else {
            for (int e = 0; e < len; ++e) acc[r] = fmaf(xv[e], wv[s][e], acc[r]);
          }
        }
      }
    }

#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
      float v = acc[r];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
      if (lane == 0 && r < rows) y[(m0 + size_t(r)) * N + n] = bias != nullptr ? v + bias[n] : v;
    }
  }
}

namespace {

template <DType T>
cudaError_t launch_typed(const float* x, size_t M, size_t K, const void* w, size_t N,
                         const float* bias, float* y, cudaStream_t stream) {
  const size_t blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;  // gridDim.x limit
  // 16-byte loads need 16-byte aligned rows: K a multiple of 8 (4 for f32 weights,
  // but x is f32 too, so 8 keeps both simple) and aligned base pointers. The choice
  // changes how elements are loaded, never the arithmetic.
  const bool vec =
      K % 8 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16) == 0;
  const unsigned grid = unsigned(blocks), block = kWarpsPerBlock * 32;
  if (vec) {
    matmul_kernel<T, true><<<grid, block, 0, stream>>>(x, M, K, w, N, bias, y);
  } else {
    matmul_kernel<T, false><<<grid, block, 0, stream>>>(x, M, K, w, N, bias, y);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_matmul(const float* x, size_t M, size_t K, const void* w, DType wt, size_t N,
                          const float* bias, float* y, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  switch (wt) {
    case DType::f32:
      return launch_typed<DType::f32>(x, M, K, w, N, bias, y, stream);
    case DType::f16:
      return launch_typed<DType::f16>(x, M, K, w, N, bias, y, stream);
    case DType::bf16:
      return launch_typed<DType::bf16>(x, M, K, w, N, bias, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace vc::cuda

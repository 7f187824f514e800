// Batch-invariant matmul (see matmul.cuh for the reduction order every element
// follows). A warp owns NC output columns: its 32 lanes read each weight row W[n, :]
// as consecutive 16-byte chunks (a warp reads 512 contiguous bytes per row and step),
// kSteps steps of all NC rows loaded ahead of their FMAs, so that 64-128 bytes per
// lane are in flight -- decode is bound by HBM bandwidth, and this keeps enough reads
// outstanding. The rows of x are read from L1/L2 (small, shared by every warp); with
// NC columns per warp each x load serves NC weight rows, which is what keeps batches
// of rows (batched drafting, verify blocks) from being bound by L1 instead of HBM.
// NC and kSteps only decide which thread does an element's FMAs and when its loads
// are issued: every element still sums its chunks in the order of matmul.cuh.
#include <cstdint>

#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/matmul.cuh"

namespace vc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;
constexpr int kRowTile = int(kMatmulRowTile);
// From this many rows on a warp owns 4 columns (x loads shared 4 ways); below it
// one column (4x the warps, more parallelism for a single decode row).
constexpr size_t kWideFromRows = 4;

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

template <DType T, bool kVec, int NC, int kSteps>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matmul_kernel(const float* __restrict__ x, size_t M, size_t K, const void* w, size_t N,
                  const float* __restrict__ bias, float* __restrict__ y) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t n0 = (size_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * NC;
  if (n0 >= N) return;  // whole warps leave together
  const int cols = int(N - n0 < size_t(NC) ? N - n0 : size_t(NC));
  const auto* wbase = static_cast<const typename Elem<T>::type*>(w);
  const size_t chunks = (K + 7) / 8;

  for (size_t m0 = 0; m0 < M; m0 += kRowTile) {
    const int rows = int(M - m0 < size_t(kRowTile) ? M - m0 : size_t(kRowTile));
    float acc[kRowTile][NC];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r)
#pragma unroll
      for (int j = 0; j < NC; ++j) acc[r][j] = 0.f;

    for (size_t c0 = lane; c0 < chunks; c0 += 32 * kSteps) {
      float wv[kSteps][NC][8];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const size_t c = c0 + size_t(s) * 32;
#pragma unroll
        for (int j = 0; j < NC; ++j)
          if (c < chunks && j < cols) load_chunk<T, kVec>(wbase + (n0 + j) * K, c * 8, K, wv[s][j]);
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const size_t c = c0 + size_t(s) * 32;
        if (c >= chunks) break;
        const size_t k0 = c * 8;
        const int len = int(K - k0 < 8 ? K - k0 : 8);
#pragma unroll
        for (int r = 0; r < kRowTile; ++r) {
          if (r >= rows) break;
          float xv[8];
          load_chunk<DType::f32, kVec>(x + (m0 + size_t(r)) * K, k0, K, xv);
#pragma unroll
          for (int j = 0; j < NC; ++j) {
            if (j >= cols) break;
            if (len == 8) {
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[r][j] = fmaf(xv[e], wv[s][j][e], acc[r][j]);
            } else {
              for (int e = 0; e < len; ++e) acc[r][j] = fmaf(xv[e], wv[s][j][e], acc[r][j]);
            }
          }
        }
      }
    }

#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
#pragma unroll
      for (int j = 0; j < NC; ++j) {
        float v = acc[r][j];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
        const size_t n = n0 + size_t(j);
        if (lane == 0 && r < rows && j < cols)
          y[(m0 + size_t(r)) * N + n] = bias != nullptr ? v + bias[n] : v;
      }
    }
  }
}

namespace {

template <DType T, bool kVec, int NC, int kSteps>
cudaError_t launch_shape(const float* x, size_t M, size_t K, const void* w, size_t N,
                         const float* bias, float* y, cudaStream_t stream) {
  const size_t warps = (N + NC - 1) / NC;
  const size_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;  // gridDim.x limit
  matmul_kernel<T, kVec, NC, kSteps>
      <<<unsigned(blocks), kWarpsPerBlock * 32, 0, stream>>>(x, M, K, w, N, bias, y);
  return cudaGetLastError();
}

template <DType T>
cudaError_t launch_typed(const float* x, size_t M, size_t K, const void* w, size_t N,
                         const float* bias, float* y, cudaStream_t stream) {
  // 16-byte loads need 16-byte aligned rows: K a multiple of 8 (4 for f32 weights,
  // but x is f32 too, so 8 keeps both simple) and aligned base pointers. This choice,
  // like the columns per warp, changes how elements are loaded, never the arithmetic.
  const bool vec =
      K % 8 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16) == 0;
  const bool wide = M >= kWideFromRows;
  if (vec) {
    return wide ? launch_shape<T, true, 4, 2>(x, M, K, w, N, bias, y, stream)
                : launch_shape<T, true, 1, 4>(x, M, K, w, N, bias, y, stream);
  }
  return wide ? launch_shape<T, false, 4, 2>(x, M, K, w, N, bias, y, stream)
              : launch_shape<T, false, 1, 4>(x, M, K, w, N, bias, y, stream);
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

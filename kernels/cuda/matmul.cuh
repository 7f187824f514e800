// Batch-invariant matrix product for decode and verify rows on the GPU, the CUDA
// counterpart of vc::cpu::matmul: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]), x and y
// f32 row-major, W row-major in f32, f16 or bf16 (bf16 in practice), f32
// accumulation.
//
// Batch invariance (DESIGN.md, exactness contract 1): y[m, n] is a function of
// x[m, :], W[n, :] and bias[n] alone, computed in one order fixed by K:
//   lane l (0..31) of the warp that owns column n sums, one FMA per element,
//     k = 8c .. 8c+7 (those below K) for its chunks c = l, l + 32, l + 64, ... in order;
//   the 32 lane sums are added by a butterfly (xor 16, 8, 4, 2, 1);
//   then one f32 addition of bias[n].
// There is no split-K, and neither the row tile a row falls in, nor M, nor which
// block owns the column changes that order: a row computed alone gives the same
// bits as the same row in a batch of any size. The order differs from the CPU's
// (its SIMD lanes), so GPU and CPU agree within f32 rounding, not bit for bit.
//
// Built for M up to a verify block (tens of rows): every warp streams its weight
// rows (one, or four from 4 rows of x on) once per tile of kMatmulRowTile rows,
// with 16-byte loads, meant to run at HBM speed for decode and batched drafting;
// the weights are read ceil(M / kMatmulRowTile) times (the repeats mostly from L2).
// Not yet measured on a GPU. A prompt's rows go to cuBLASLt instead
// (runtime/cuda/prompt_gemm.hpp); this kernel takes them only for matrices cuBLASLt
// is not used for (not bf16, or no algorithm without a reduction).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// Rows a warp keeps accumulators for at once (a tuning constant; it does not
/// change any result).
constexpr size_t kMatmulRowTile = 8;

/// Launches on `stream` (asynchronous). x[M, K] f32, w[N, K] in `wt`, bias[N] f32 or
/// nullptr, y[M, N] f32: device pointers; y must not overlap x. Returns the launch
/// status (cudaSuccess when M or N is 0: nothing to do; with K == 0, y = bias or 0).
cudaError_t launch_matmul(const float* x, size_t M, size_t K, const void* w, DType wt, size_t N,
                          const float* bias, float* y, cudaStream_t stream);

}  // namespace vc::cuda

// RMSNorm on the GPU: out[m, :] = x[m, :] / sqrt(mean(x[m, :]^2) + eps) * weight[:]
// for f32 rows of `dim` elements, the CUDA counterpart of vc::cpu::rms_norm (same
// formula and operation order for the final scaling; the sum of squares is an f32
// tree reduction, so results agree with the CPU to about 1e-6 relative, not bit
// for bit).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// Launches one thread block per row on `stream` (asynchronous). x, weight and out
/// are device pointers; x[M, dim], weight[dim], out[M, dim]; out == x is allowed.
/// Returns the launch status (cudaSuccess for M == 0 or dim == 0: nothing to do;
/// cudaErrorInvalidValue when M exceeds the grid limit).
cudaError_t launch_rms_norm(const float* x, size_t M, size_t dim, const float* weight, float eps,
                            float* out, cudaStream_t stream);

/// As above with the weight stored in `wt` (f32, f16 or bf16, converted exactly), as
/// vc::cpu::rms_norm takes it: the model's norm weights and Qwen3's q/k norm weights
/// are used as loaded.
cudaError_t launch_rms_norm(const float* x, size_t M, size_t dim, const void* weight, DType wt,
                            float eps, float* out, cudaStream_t stream);

}  // namespace vc::cuda

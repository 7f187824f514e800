// f32 -> bf16 on the GPU, round to nearest even, the CUDA counterpart of
// vc::f32_to_bf16 (kernels/dtype.hpp): bit for bit, NaN stays NaN. What a prompt
// chunk's rows go through before the GEMM library multiplies them by bf16 weights.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vc::cuda {

/// Launches on `stream` (asynchronous); x: n floats, out: n bf16 (device). Returns
/// the launch status (cudaSuccess for n == 0).
cudaError_t launch_to_bf16(const float* x, size_t n, uint16_t* out, cudaStream_t stream);

}  // namespace vc::cuda

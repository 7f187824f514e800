// Residual add on the GPU, the CUDA counterpart of vc::cpu::add_inplace:
// y[i] += x[i] (one f32 addition per element: bit-identical to the CPU).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace vc::cuda {

/// Launches on `stream` (asynchronous); y, x: n floats (device). Returns the launch
/// status (cudaSuccess for n == 0).
cudaError_t launch_add_inplace(float* y, const float* x, size_t n, cudaStream_t stream);

}  // namespace vc::cuda

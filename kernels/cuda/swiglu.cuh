// SwiGLU on the GPU, the CUDA counterpart of vc::cpu::swiglu:
// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), with the CPU's exp
// approximation (exp_approx.cuh) and unfused f32 steps: bit-identical to the CPU's
// scalar path; its AVX2/AVX-512 paths (FMA in their exp) agree to a few ulp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace vc::cuda {

/// Launches on `stream` (asynchronous); gate, up, out: n floats (device); out may be
/// gate or up. Returns the launch status (cudaSuccess for n == 0).
cudaError_t launch_swiglu(const float* gate, const float* up, float* out, size_t n,
                          cudaStream_t stream);

}  // namespace vc::cuda

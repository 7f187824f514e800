// Rotate-half RoPE on the GPU, the CUDA counterpart of vc::cpu::rope: in place on
// x[M, n_heads, head_dim], for i < head_dim/2 with a = positions[m] * inv_freq[i],
//   x1' = x1 cos a - x2 sin a,  x2' = x2 cos a + x1 sin a   (x1 = x[i], x2 = x[i + half]).
// As on the CPU the angle, its cosine and sine are computed in double and rounded to
// float, and the rotation is two f32 products and one f32 sum each, never fused: the
// result equals the CPU's bit for bit wherever the device's double cos/sin round to
// the same float as the host's (all but a rare last-bit case).
//
// Llama-3 frequency scaling lives in inv_freq (ModelConfig::rope_inv_freq(), computed
// once on the host and uploaded); Qwen3's per-head q/k norm is launch_rms_norm over
// M * n_heads rows of head_dim before this call; the QKV bias is added by the
// projection (launch_matmul's bias). This is the order runtime/forward.cpp uses.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vc::cuda {

/// Launches on `stream` (asynchronous). x[M, n_heads, head_dim] (device, in place),
/// positions[M] (device), inv_freq[head_dim / 2] (device). Returns the launch status
/// (cudaSuccess when there is nothing to do).
cudaError_t launch_rope(float* x, size_t M, size_t n_heads, size_t head_dim,
                        const int32_t* positions, const float* inv_freq, cudaStream_t stream);

}  // namespace vc::cuda

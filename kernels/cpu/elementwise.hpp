// Row-wise and element-wise ops of a Llama-family layer: RMSNorm, RoPE, SwiGLU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cpu {

/// out[m, :] = x[m, :] / sqrt(mean(x[m, :]^2) + eps) * weight[:]; rows of `dim`
/// elements; `weight` in `wt`. In-place (out == x) is allowed. Per-row result does
/// not depend on M.
void rms_norm(const float* x, size_t M, size_t dim, const void* weight, DType wt, float eps,
              float* out);

/// Rotate-half RoPE (the Hugging Face Llama convention) in place on
/// x[M, n_heads, head_dim]: for i < head_dim/2, with a = pos[m] * inv_freq[i],
///   x1' = x1 cos a - x2 sin a,  x2' = x2 cos a + x1 sin a,
/// where x1 = x[i], x2 = x[i + head_dim/2]. The angle and its sine and cosine are
/// computed in double precision, then rounded to float: same position, same bits.
void rope(float* x, size_t M, size_t n_heads, size_t head_dim, const int32_t* positions,
          const float* inv_freq);

/// out[i] = silu(gate[i]) * up[i] for i < n; silu(g) = g / (1 + exp(-g)).
void swiglu(const float* gate, const float* up, float* out, size_t n);

/// y[i] += x[i] for i < n (residual add).
void add_inplace(float* y, const float* x, size_t n);

}  // namespace vc::cpu

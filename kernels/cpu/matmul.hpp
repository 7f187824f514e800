// Dense matrix product against a weight matrix stored row-major as [N, K].
#pragma once
#include <cstddef>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {

/// y[M, N] = x[M, K] · W[N, K]^T (+ bias[N] when non-null), fp32 accumulation.
/// x: [M, K] fp32 row-major; w: [N, K] in `wt` row-major; y: [M, N] fp32.
///
/// Batch invariance (the base of the exactness contract): y[m, n] is a function of
/// x[m, :] and W[n, :] alone, computed with one fixed accumulation order over K,
/// whatever M, the tile an element falls in, or the thread count. There is no
/// split-K. Work is split across `pool` threads by output features N.
void matmul(const float* x, size_t M, size_t K, const void* w, DType wt, size_t N,
            const float* bias, float* y, ThreadPool* pool);

}  // namespace vc::cpu

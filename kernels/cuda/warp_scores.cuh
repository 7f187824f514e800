// Internal (device code): one K row's scores for a group of query heads, computed by
// one warp, shared by the paged attention kernel (attention.cu) and the drafter's
// mixed attention (attention_mixed.cu). Each lane holds pairs of the row's columns
// (pair s: columns 64 s + 2 lane, + 1); per head the lane's products are summed in
// column order with fmaf, then across the warp by an xor butterfly, as the CPU's
// attention kernels' results are checked against.
#pragma once
#include <cstddef>

#include "kernels/cuda/attention.cuh"  // kAttentionMaxHeadDim

namespace vc::cuda {

/// Column pairs a lane holds at the largest head_dim.
constexpr int kMaxPairSteps = int(kAttentionMaxHeadDim / 64);

/// out[h * stride] = qs[h] . k for heads h < group (qs: [group][D] scaled queries;
/// kp: this lane's `steps` pairs of the K row, zero where past D). Lane 0 writes.
__device__ __forceinline__ void warp_scores(const float2* kp, const float* qs, size_t group,
                                            size_t D, int steps, size_t lane, float* out,
                                            size_t stride) {
  for (size_t h = 0; h < group; ++h) {
    const float* qh = qs + h * D;
    float acc = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxPairSteps; ++s) {
      const size_t d = size_t(s) * 64 + 2 * lane;
      if (s < steps && d < D) {
        acc = fmaf(qh[d], kp[s].x, acc);
        acc = fmaf(qh[d + 1], kp[s].y, acc);
      }
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) out[h * stride] = acc;
  }
}

}  // namespace vc::cuda

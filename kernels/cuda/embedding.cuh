// Embedding gather on the GPU: out[m, :] = f32(table[ids[m], :]), the CUDA counterpart
// of the CPU forward's first step (vc::to_f32 of one table row per token,
// runtime/forward.cpp). The conversion is exact, so the result is bit-identical to
// the CPU's.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// Launches one thread block per row on `stream` (asynchronous). ids[M] (device),
/// table[vocab, dim] in `dt` (device), out[M, dim] f32 (device). A row whose id is
/// outside [0, vocab) is written as zeros and, when `bad_ids` (device, one int) is
/// non-null, counted there: the CPU validates ids before the forward pass, the GPU
/// cannot throw, so the caller checks the count where it already synchronizes.
/// Returns the launch status (cudaSuccess for M == 0 or dim == 0).
cudaError_t launch_embedding(const int32_t* ids, size_t M, const void* table, DType dt,
                             size_t vocab, size_t dim, float* out, int* bad_ids,
                             cudaStream_t stream);

}  // namespace vc::cuda

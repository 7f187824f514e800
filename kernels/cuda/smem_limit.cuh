// A kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize)
// is per kernel and device, not per launch: host threads launching one kernel with
// different sizes must not set it to each launch's own size (a thread lowering it
// between another's set and launch fails that launch). So it only ever rises.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace vc::cuda {

/// Makes `kernel` launchable with `bytes` of dynamic shared memory on the current
/// device: raises its limit when below (never lowers it). Thread-safe.
inline cudaError_t raise_dynamic_smem_limit(const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;  // every kernel's default allowance
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> limits;
  std::lock_guard<std::mutex> lock(mu);
  size_t& limit = limits[{device, kernel}];
  if (limit >= bytes) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e == cudaSuccess) limit = bytes;
  return e;
}

}  // namespace vc::cuda

// time_calls (declared in bench.hpp): CUDA events around a run of calls.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.hpp"

namespace vc::cuda::bench {

template <class F>
double time_calls(F&& launch, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) CUDA_CHECK(launch(i));
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start));
  // Timed calls go on from the warmup's index: callers that rotate through copies of
  // their data (to read from HBM, not L2) then start on copies the warmup left alone.
  for (int i = 0; i < reps; ++i) CUDA_CHECK(launch(warmup + i));
  CUDA_CHECK(cudaEventRecord(stop));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / 1e3 / reps;
}

}  // namespace vc::cuda::bench

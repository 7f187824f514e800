// cuda_copy_bandwidth with CUDA: device-to-device copies of 256 MiB timed with events.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "runtime/device.hpp"

namespace vc {

double cuda_copy_bandwidth(int index) {
  constexpr size_t kBytes = size_t(256) << 20;  // far past L2
  void *a = nullptr, *b = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  double best = 0.0;
  if (cudaSetDevice(index) == cudaSuccess && cudaMalloc(&a, kBytes) == cudaSuccess &&
      cudaMalloc(&b, kBytes) == cudaSuccess && cudaEventCreate(&t0) == cudaSuccess &&
      cudaEventCreate(&t1) == cudaSuccess && cudaMemset(a, 1, kBytes) == cudaSuccess) {
    std::vector<double> rates;
    for (int r = 0; r < 6; ++r) {  // the first warms up
      cudaEventRecord(t0);
      cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice);
      cudaEventRecord(t1);
      float ms = 0.0f;
      if (cudaEventSynchronize(t1) != cudaSuccess || cudaEventElapsedTime(&ms, t0, t1) != cudaSuccess) break;
      if (r > 0 && ms > 0.0f) rates.push_back(2.0 * double(kBytes) / (double(ms) * 1e-3));  // read + write
    }
    if (!rates.empty()) {
      std::sort(rates.begin(), rates.end());
      best = rates[rates.size() / 2];  // the median
    }
  }
  if (t0 != nullptr) cudaEventDestroy(t0);
  if (t1 != nullptr) cudaEventDestroy(t1);
  if (a != nullptr) cudaFree(a);
  if (b != nullptr) cudaFree(b);
  (void)cudaGetLastError();  // a failure here is not the next launch's
  return best;
}

}  // namespace vc

// cuda_memory with CUDA: cudaMemGetInfo on the device.
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/error.hpp"
#include "runtime/device.hpp"

namespace vc {

DeviceMemory cuda_memory(int index) {
  const std::string dev = "device cuda:" + std::to_string(index);
  cudaError_t e = cudaSetDevice(index);
  DeviceMemory m;
  if (e == cudaSuccess) e = cudaMemGetInfo(&m.free, &m.total);
  if (e != cudaSuccess) {
    const std::string why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();  // not the next launch's error
    throw Error(dev + ": cannot read its free memory (" + why + ")");
  }
  return m;
}

}  // namespace vc

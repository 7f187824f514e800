// cuda_pci_bus_id with CUDA: the runtime's own answer for a device ordinal.
#include <cuda_runtime_api.h>

#include "runtime/device.hpp"

namespace vc {

std::string cuda_pci_bus_id(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, int(sizeof id), index) != cudaSuccess) {
    (void)cudaGetLastError();  // not a launch error of this thread's next kernel
    return "";
  }
  return id;
}

}  // namespace vc

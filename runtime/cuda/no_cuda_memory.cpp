// cuda_memory in a build without CUDA: no device to ask.
#include <string>

#include "kernels/error.hpp"
#include "runtime/device.hpp"

namespace vc {

DeviceMemory cuda_memory(int index) {
  throw Error("device cuda:" + std::to_string(index) + ": this build has no CUDA");
}

}  // namespace vc

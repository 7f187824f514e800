// make_cuda_attention in a build without CUDA (nvcc not found, or VC_WITH_CUDA=OFF).
#include "kernels/error.hpp"
#include "runtime/attention_backend.hpp"

namespace vc {

std::shared_ptr<AttentionBackend> make_cuda_attention(int index) {
  throw Error("device cuda:" + std::to_string(index) +
              ": this build has no CUDA (it was configured without nvcc, or with "
              "-DVC_WITH_CUDA=OFF); rebuild with the CUDA toolkit to use a GPU");
}

}  // namespace vc

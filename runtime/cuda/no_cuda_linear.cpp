// make_cuda_linear in a build without CUDA (nvcc not found, or VC_WITH_CUDA=OFF).
#include "kernels/error.hpp"
#include "runtime/linear_backend.hpp"

namespace vc {

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight>, std::span<const Weight>,
                                                std::span<const Weight>, int index) {
  throw Error("device cuda:" + std::to_string(index) +
              ": this build has no CUDA (it was configured without nvcc, or with "
              "-DVC_WITH_CUDA=OFF); rebuild with the CUDA toolkit to use a GPU");
}

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                std::span<const Weight> biases, int index) {
  return make_cuda_linear(matrices, biases, {}, index);
}

}  // namespace vc

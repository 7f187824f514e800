// SwiGLU (silu(gate) * up) for the avx512 path: elementwise_kernel.hpp with Avx512Simd.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/elementwise_kernel.hpp"
#include "kernels/cpu/elementwise_paths.hpp"

namespace vc::cpu {

void swiglu_avx512(const float* gate, const float* up, float* out, size_t n) {
  swiglu_generic<Avx512Simd>(gate, up, out, n);
}

}  // namespace vc::cpu

// SwiGLU (silu(gate) * up) for the avx2 path: elementwise_kernel.hpp with Avx2Simd.
#include "kernels/cpu/simd_avx2.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/elementwise_kernel.hpp"
#include "kernels/cpu/elementwise_paths.hpp"

namespace vc::cpu {

void swiglu_avx2(const float* gate, const float* up, float* out, size_t n) {
  swiglu_generic<Avx2Simd>(gate, up, out, n);
}

}  // namespace vc::cpu

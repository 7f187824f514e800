// Matmul y = x · W^T for the scalar path (baseline x86-64: no FMA, two roundings per multiply-add):
// the generic tiled kernel of matmul_kernel.hpp instantiated with ScalarSimd.
#include "kernels/cpu/simd_scalar.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/matmul_kernel.hpp"

namespace vc::cpu {

void matmul_cols_scalar(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                    size_t pack_rows) {
  matmul_cols<ScalarSimd>(job, n_begin, n_end, pack, pack_rows);
}

}  // namespace vc::cpu

// Matmul y = x · W^T for the AVX-512 path (16-lane FMA, masked K tail):
// the generic tiled kernel of matmul_kernel.hpp instantiated with Avx512Simd.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/matmul_kernel.hpp"

namespace vc::cpu {

void matmul_cols_avx512(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                    size_t pack_rows) {
  matmul_cols<Avx512Simd>(job, n_begin, n_end, pack, pack_rows);
}

}  // namespace vc::cpu

// Matmul y = x · W^T for the AVX2 path (8-lane FMA, compiled with -mavx2 -mfma -mf16c):
// the generic tiled kernel of matmul_kernel.hpp instantiated with Avx2Simd.
#include "kernels/cpu/simd_avx2.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/matmul_kernel.hpp"

namespace vc::cpu {

void matmul_cols_avx2(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                    size_t pack_rows) {
  matmul_cols<Avx2Simd>(job, n_begin, n_end, pack, pack_rows);
}

}  // namespace vc::cpu

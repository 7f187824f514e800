// Fast Walsh-Hadamard transform: log2(n) butterfly passes, then a 1/sqrt(n) scale
// (cpu::hadamard_rows: the same bits on every SIMD path).
#include "kvtiers/compressors/hadamard.hpp"

#include <cmath>
#include <string>

#include "kernels/cpu/row_transforms.hpp"
#include "kernels/error.hpp"

namespace vc {

void hadamard_inplace(float* x, size_t n) {
  if (n == 0 || (n & (n - 1)) != 0) {
    throw Error("hadamard_inplace: length must be a power of two, got " + std::to_string(n));
  }
  cpu::hadamard_rows(x, 1, n);  // the butterflies in order, SIMD where the CPU has it
}

}  // namespace vc

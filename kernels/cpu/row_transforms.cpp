// row_transforms.hpp: checks the arguments, then runs the active path's kernel (the
// AVX-512 one where the CPU has it; the AVX2 path runs the scalar kernel).
#include "kernels/cpu/row_transforms.hpp"

#include <string>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/row_transforms_paths.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

namespace {

bool avx512_active() {
  switch (active_simd_path()) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return true;
    case SimdPath::avx2:
    case SimdPath::scalar:
      break;
  }
  return false;
}

}  // namespace

void hadamard_rows(float* x, size_t rows, size_t d) {
  if (d == 0 || (d & (d - 1)) != 0)
    throw Error("hadamard_rows: length must be a power of two, got " + std::to_string(d));
  if (avx512_active()) return hadamard_rows_avx512(x, rows, d);
  hadamard_rows_scalar(x, rows, d);
}

void rope_row_f64(float* x, size_t d, const double* cs, double sign) {
  if (d % 2 != 0) throw Error("rope_row_f64: length must be even, got " + std::to_string(d));
  if (avx512_active()) return rope_row_f64_avx512(x, d, cs, sign);
  rope_row_f64_scalar(x, d, cs, sign);
}

}  // namespace vc::cpu

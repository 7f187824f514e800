// row_transforms.hpp for the scalar path (baseline x86-64): the reference order of
// operations every path keeps.
#include <cmath>

#include "kernels/cpu/row_transforms_paths.hpp"

namespace vc::cpu {

void hadamard_rows_scalar(float* x, size_t rows, size_t d) {
  const float s = float(1.0 / std::sqrt(double(d)));
  for (size_t r = 0; r < rows; ++r) {
    float* row = x + r * d;
    for (size_t h = 1; h < d; h *= 2)
      for (size_t i = 0; i < d; i += 2 * h)
        for (size_t j = i; j < i + h; ++j) {
          const float a = row[j], b = row[j + h];
          row[j] = a + b;
          row[j + h] = a - b;
        }
    for (size_t i = 0; i < d; ++i) row[i] *= s;
  }
}

void rope_row_scalar(float* x, size_t d, const float* cs, float sign) {
  const size_t h = d / 2;
  for (size_t i = 0; i < h; ++i) {
    const float c = cs[i], s = sign * cs[h + i];
    const float x1 = x[i], x2 = x[i + h];
    x[i] = x1 * c - x2 * s;
    x[i + h] = x2 * c + x1 * s;
  }
}

}  // namespace vc::cpu

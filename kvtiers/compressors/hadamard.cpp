// Fast Walsh-Hadamard transform: log2(n) butterfly passes, then a 1/sqrt(n) scale.
#include "kvtiers/compressors/hadamard.hpp"

#include <cmath>
#include <string>

#include "kernels/error.hpp"

namespace vc {

void hadamard_inplace(float* x, size_t n) {
  if (n == 0 || (n & (n - 1)) != 0) {
    throw Error("hadamard_inplace: length must be a power of two, got " + std::to_string(n));
  }
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float s = float(1.0 / std::sqrt(double(n)));
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace vc

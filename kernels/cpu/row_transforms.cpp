// row_transforms.hpp: checks the arguments, then runs the active path's kernel (the
// AVX-512 one where the CPU has it; the AVX2 path runs the scalar kernel).
#include "kernels/cpu/row_transforms.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

void rope_row(float* x, size_t d, const float* cs, float sign) {
  if (d % 2 != 0) throw Error("rope_row: length must be even, got " + std::to_string(d));
  if (avx512_active()) return rope_row_avx512(x, d, cs, sign);
  rope_row_scalar(x, d, cs, sign);
}

const float* rope_table(const float* inv_freq, size_t h, size_t last_pos) {
  struct Cache {
    std::vector<float> inv;
    std::vector<float> cs;  // [rows][cos h][sin h]
    size_t rows = 0;
  };
  thread_local Cache c;
  if (c.inv.size() != h || !std::equal(c.inv.begin(), c.inv.end(), inv_freq)) {
    c.inv.assign(inv_freq, inv_freq + h);
    c.cs.clear();
    c.rows = 0;
  }
  if (last_pos >= c.rows) {
    const size_t rows = std::max({last_pos + 1, 2 * c.rows, size_t(1024)});
    c.cs.resize(rows * h * 2);
    for (size_t p = c.rows; p < rows; ++p)
      for (size_t i = 0; i < h; ++i) {
        const double a = double(p) * double(inv_freq[i]);
        c.cs[p * 2 * h + i] = float(std::cos(a));
        c.cs[p * 2 * h + h + i] = float(std::sin(a));
      }
    c.rows = rows;
  }
  return c.cs.data();
}

}  // namespace vc::cpu

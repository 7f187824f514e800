// Row-wise and element-wise ops of a Llama-family layer: RMSNorm, RoPE, SwiGLU and
// the residual add. RMSNorm, RoPE and the add are one portable implementation for
// every SIMD path (they are a small share of the time and this keeps their bits
// path-independent); SwiGLU dispatches to a per-path kernel because of its exp.
#include "kernels/cpu/elementwise.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/elementwise_paths.hpp"
#include "kernels/cpu/simd_scalar.hpp"
#include "kernels/cpu/elementwise_kernel.hpp"

namespace vc::cpu {
namespace {

// cos/sin of pos * inv_freq[i], computed in double then rounded to float, cached per
// thread by position: the same position always gives the same bits, and prefill /
// every layer reuse them instead of calling sin and cos again.
struct RopeTable {
  std::vector<float> inv;    // the inv_freq the table was built for
  std::vector<float> cs;     // [pos][cos 0..half, sin 0..half]
  std::vector<uint8_t> have; // per position: computed yet
};

constexpr int32_t kRopeCachedPositions = 1 << 16;

void rope_angles(const float* inv_freq, size_t half, int32_t pos, float* cs) {
  for (size_t i = 0; i < half; ++i) {
    const double a = double(pos) * double(inv_freq[i]);
    cs[i] = float(std::cos(a));
    cs[half + i] = float(std::sin(a));
  }
}

const float* rope_table_row(RopeTable& t, const float* inv_freq, size_t half, int32_t pos,
                            float* tmp) {
  if (pos < 0 || pos >= kRopeCachedPositions) {
    rope_angles(inv_freq, half, pos, tmp);
    return tmp;
  }
  if (t.inv.size() != half || std::memcmp(t.inv.data(), inv_freq, half * sizeof(float)) != 0) {
    t.inv.assign(inv_freq, inv_freq + half);
    t.cs.clear();
    t.have.clear();
  }
  const size_t p = size_t(pos);
  if (t.have.size() <= p) {
    t.have.resize(p + 1, 0);
    t.cs.resize((p + 1) * 2 * half);
  }
  float* row = t.cs.data() + p * 2 * half;
  if (!t.have[p]) {
    rope_angles(inv_freq, half, pos, row);
    t.have[p] = 1;
  }
  return row;
}

}  // namespace

void rms_norm(const float* x, size_t M, size_t dim, const void* weight, DType wt, float eps,
              float* out) {
  const float* w = static_cast<const float*>(weight);
  thread_local std::vector<float> wbuf;
  if (wt != DType::f32) {
    if (wbuf.size() < dim) wbuf.resize(dim);
    to_f32(wt, weight, wbuf.data(), dim);
    w = wbuf.data();
  }
  for (size_t m = 0; m < M; ++m) {
    const float* xr = x + m * dim;
    float* yr = out + m * dim;
    // Sum of squares in double (each square is exact in double), four partial sums
    // in a fixed order for instruction-level parallelism.
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= dim; i += 4) {
      for (size_t j = 0; j < 4; ++j) s[j] += double(xr[i + j]) * double(xr[i + j]);
    }
    for (; i < dim; ++i) s[0] += double(xr[i]) * double(xr[i]);
    const double mean = ((s[0] + s[1]) + (s[2] + s[3])) / double(dim);
    const float inv = float(1.0 / std::sqrt(mean + double(eps)));
    for (size_t k = 0; k < dim; ++k) yr[k] = (xr[k] * inv) * w[k];
  }
}

void rope(float* x, size_t M, size_t n_heads, size_t head_dim, const int32_t* positions,
          const float* inv_freq) {
  const size_t half = head_dim / 2;
  thread_local RopeTable table;
  thread_local std::vector<float> tmp;
  if (tmp.size() < 2 * half) tmp.resize(2 * half);
  for (size_t m = 0; m < M; ++m) {
    const float* cs = rope_table_row(table, inv_freq, half, positions[m], tmp.data());
    const float* c = cs;
    const float* s = cs + half;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + (m * n_heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c[i] - x2 * s[i];
        v[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

void swiglu_scalar(const float* gate, const float* up, float* out, size_t n) {
  swiglu_generic<ScalarSimd>(gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, size_t n) {
  switch (active_simd_path()) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return swiglu_avx512(gate, up, out, n);
    case SimdPath::avx2:
      return swiglu_avx2(gate, up, out, n);
    case SimdPath::scalar:
      break;
  }
  swiglu_scalar(gate, up, out, n);
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace vc::cpu

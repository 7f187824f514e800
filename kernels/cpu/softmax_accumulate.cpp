// Row softmax then column sums (softmax_accumulate.hpp). Plain loops the compiler
// vectorises, cloned per instruction set (target_clones: AVX-512, AVX2, baseline)
// and chosen at load time; the branch-free exp is the exp_approx.hpp polynomial.
// Reductions keep 16 partial lanes in a fixed order, so each clone is deterministic
// (clones may differ from each other in the last bits: FMA contraction).
#include "kernels/cpu/softmax_accumulate.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/exp_approx.hpp"

namespace vc::cpu {

namespace {

// target_clones picks a clone through an ifunc resolver that runs while the program
// is relocated, before a ThreadSanitizer runtime is up: an instrumented resolver
// crashes at load. Under TSan the plain (baseline) code is used.
#if defined(__SANITIZE_THREAD__)
#define VC_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VC_CLONES
#endif
#endif
#ifndef VC_CLONES
#define VC_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#endif

constexpr size_t kLanes = 16;

// exp(x) for x <= 0 (scores minus their row maximum): 0 below kExpLo.
inline float exp_nonpositive(float x) {
  using namespace exp_approx;
  const float xc = std::max(x, kExpLo);
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;  // round to nearest
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  return x < kExpLo ? 0.0f : p * two_n;
}

// Row i: scale, max, exp, in place over [0, len); returns 1 / the row's sum (the
// weights are s[t] * that, applied as the columns are summed).
VC_CLONES float softmax_row(float* s, size_t len, float scale) {
  float mx[kLanes];
  std::fill_n(mx, kLanes, -std::numeric_limits<float>::infinity());
  size_t t = 0;
  for (; t + kLanes <= len; t += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      s[t + j] *= scale;
      mx[j] = std::max(mx[j], s[t + j]);
    }
  for (; t < len; ++t) {
    s[t] *= scale;
    mx[0] = std::max(mx[0], s[t]);
  }
  float m = mx[0];
  for (size_t j = 1; j < kLanes; ++j) m = std::max(m, mx[j]);
  float sum[kLanes] = {};
  t = 0;
  for (; t + kLanes <= len; t += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      s[t + j] = exp_nonpositive(s[t + j] - m);
      sum[j] += s[t + j];
    }
  for (; t < len; ++t) {
    s[t] = exp_nonpositive(s[t] - m);
    sum[0] += s[t];
  }
  float total = 0;
  for (size_t j = 0; j < kLanes; ++j) total += sum[j];
  return 1.0f / total;
}

// acc[t] += s[i, t] * inv[i] for the rows that reach t, columns [begin, end).
VC_CLONES void add_columns(const float* s, const float* inv, size_t rows, size_t ncols,
                           const size_t* len, float* acc, size_t begin, size_t end) {
  for (size_t i = 0; i < rows; ++i) {
    const size_t stop = std::min(end, len[i]);
    const float* row = s + i * ncols;
    const float w = inv[i];
    for (size_t t = begin; t < stop; ++t) acc[t] += row[t] * w;
  }
}

}  // namespace

void softmax_accumulate(float* s, size_t rows, size_t ncols, const size_t* len, float scale,
                        float* acc, ThreadPool* pool) {
  thread_local std::vector<float> inv;
  inv.resize(rows);
  float* inv_p = inv.data();  // the pool's threads write and read the caller's buffer
  auto rows_part = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) inv_p[i] = softmax_row(s + i * ncols, len[i], scale);
  };
  auto cols_part = [&](size_t b, size_t e) { add_columns(s, inv_p, rows, ncols, len, acc, b, e); };
  if (pool != nullptr && rows * ncols >= (size_t(1) << 16)) {
    pool->parallel_for(rows, 1, rows_part);
    pool->parallel_for(ncols, 64, cols_part);
  } else {
    rows_part(0, rows);
    cols_part(0, ncols);
  }
}

}  // namespace vc::cpu

// score_rows (attention_scores.hpp): per block of keys, a transposed fp32 copy
// kt[d][j], then 4 query rows at a time accumulate 16 keys' scores in lanes.
// Plain loops the compiler vectorises, cloned per instruction set
// (target_clones) and chosen at load time, as in softmax_accumulate.cpp.
#include "kernels/cpu/attention_scores.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

namespace {

// See softmax_accumulate.cpp: no ifunc resolvers under ThreadSanitizer.
#if defined(__SANITIZE_THREAD__)
#define VC_SCORE_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VC_SCORE_CLONES
#endif
#endif
#ifndef VC_SCORE_CLONES
#define VC_SCORE_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#endif

constexpr size_t kLanes = 16;  // keys per group of accumulators

// Scores of rows [0, rows) against the kLanes keys of kt ([D][kLanes]), written
// to s + i * lds for the first `n` keys. Rows go 4 at a time through one loop
// (a last group of fewer rows repeats its last row and drops the copies), so
// every row's scores come from the same instructions wherever it falls.
VC_SCORE_CLONES void score_group(const float* q, size_t ldq, size_t rows, const float* kt, size_t D,
                                 float* s, size_t lds, size_t n) {
  for (size_t i = 0; i < rows; i += 4) {
    const size_t r = std::min<size_t>(4, rows - i);
    float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
    const float* q0 = q + i * ldq;
    const float* q1 = q + (i + std::min<size_t>(1, r - 1)) * ldq;
    const float* q2 = q + (i + std::min<size_t>(2, r - 1)) * ldq;
    const float* q3 = q + (i + std::min<size_t>(3, r - 1)) * ldq;
    for (size_t d = 0; d < D; ++d) {
      const float* k = kt + d * kLanes;
      const float x0 = q0[d], x1 = q1[d], x2 = q2[d], x3 = q3[d];
      for (size_t j = 0; j < kLanes; ++j) {
        a0[j] += x0 * k[j];
        a1[j] += x1 * k[j];
        a2[j] += x2 * k[j];
        a3[j] += x3 * k[j];
      }
    }
    const float* out[4] = {a0, a1, a2, a3};
    for (size_t row = 0; row < r; ++row)
      for (size_t j = 0; j < n; ++j) s[(i + row) * lds + j] = out[row][j];
  }
}

}  // namespace

size_t transposed_keys_size(size_t ncols, size_t head_dim) {
  return (ncols + kLanes - 1) / kLanes * kLanes * head_dim;
}

void transpose_keys(const PagedKv& kv, size_t g, size_t ncols, std::vector<float>& kt,
                    ThreadPool* pool) {
  if (g >= kv.kv_heads || kv.k == nullptr || kv.block_table == nullptr || kv.block_tokens == 0)
    throw Error("score_rows: KV head " + std::to_string(g) + " of " + std::to_string(kv.kv_heads) +
                ", or no keys");
  const size_t D = kv.head_dim, bt = kv.block_tokens, esz = dtype_size(kv.dtype);
  for (size_t j = 0; j < (ncols + bt - 1) / bt; ++j)
    if (kv.block_table[j] < 0)
      throw Error("score_rows: block_table[" + std::to_string(j) + "] is negative");
  kt.resize(transposed_keys_size(ncols, D));
  const size_t groups = (ncols + kLanes - 1) / kLanes;
  auto part = [&](size_t b, size_t e) {
    std::vector<float> row(D);
    for (size_t grp = b; grp < e; ++grp) {
      float* out = kt.data() + grp * kLanes * D;
      const size_t t0 = grp * kLanes, n = std::min(kLanes, ncols - t0);
      if (n < kLanes) std::fill(out, out + kLanes * D, 0.0f);
      for (size_t j = 0; j < n; ++j) {
        const size_t t = t0 + j;
        const auto block = size_t(kv.block_table[t / bt]);
        const size_t off = ((block * kv.kv_heads + g) * bt + t % bt) * D * esz;
        to_f32(kv.dtype, static_cast<const char*>(kv.k) + off, row.data(), D);
        for (size_t d = 0; d < D; ++d) out[d * kLanes + j] = row[d];
      }
    }
  };
  if (pool != nullptr && pool->threads() > 1 && ncols * D >= (size_t(1) << 16))
    pool->parallel_for(groups, 16, part);
  else
    part(0, groups);
}

void score_rows_transposed(const float* q, size_t ldq, size_t rows, const float* kt, size_t D,
                           size_t ncols, float* s, ThreadPool* pool) {
  if (rows == 0 || ncols == 0) return;
  const size_t groups = (ncols + kLanes - 1) / kLanes;
  auto part = [&](size_t b, size_t e) {
    for (size_t grp = b; grp < e; ++grp) {
      const size_t t0 = grp * kLanes, n = std::min(kLanes, ncols - t0);
      score_group(q, ldq, rows, kt + grp * kLanes * D, D, s + t0, ncols, n);
    }
  };
  if (pool != nullptr && pool->threads() > 1 && rows * ncols >= (size_t(1) << 15))
    pool->parallel_for(groups, 4, part);
  else
    part(0, groups);
}

void score_rows(const float* q, size_t ldq, size_t rows, const PagedKv& kv, size_t g, size_t ncols,
                float* s, ThreadPool* pool) {
  if (rows == 0 || ncols == 0) return;
  std::vector<float> kt;
  transpose_keys(kv, g, ncols, kt, pool);
  score_rows_transposed(q, ldq, rows, kt.data(), kv.head_dim, ncols, s, pool);
}

void accumulate_attention_transposed(const float* q, size_t ldq, size_t rows, const float* kt,
                                     size_t D, size_t ncols, const size_t* len,
                                     const float* row_max, const float* row_inv_sum, float* acc,
                                     ThreadPool* pool) {
  if (rows == 0 || ncols == 0) return;
  AccumulateFn fn = accumulate_attention_scalar;
  switch (active_simd_path()) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      fn = accumulate_attention_avx512;
      break;
    case SimdPath::avx2:
      fn = accumulate_attention_avx2;
      break;
    case SimdPath::scalar:
      break;
  }
  const size_t groups = (ncols + kLanes - 1) / kLanes;
  auto part = [&](size_t b, size_t e) {
    fn(q, ldq, rows, kt, D, ncols, len, row_max, row_inv_sum, acc, b, e);
  };
  if (pool != nullptr && pool->threads() > 1 && rows * ncols >= (size_t(1) << 15))
    pool->parallel_for(groups, 4, part);
  else
    part(0, groups);
}

}  // namespace vc::cpu

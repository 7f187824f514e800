// Internal: accumulated attention (the probability each key receives, summed
// over query rows) from scores that never leave registers, generic over a SIMD
// traits type. Included only by attention_{scalar,avx2,avx512}.cpp; the public
// entry is accumulate_attention_transposed (attention_scores.hpp).
//
// Keys come transposed in groups of kKeyLanes positions ([head_dim][kKeyLanes],
// transpose_keys). For one group and a pass of query rows (8 or 4) at a time:
//   score(i, t) = sum over d in order of fma(q_i[d], k_t[d])       (one lane
//   per key) p(i, t)     = exp(score - max(score, row_max[i])) * row_inv_sum[i]
//                 (= exp(min(score - max, 0)): a score a rounding above the
//                 attention's own maximum gives 1, not more)
//   acc[t]     += p(i, t) for the rows that see t (t < len[i]), rows in order.
// A key's sum is one lane of one register from the first row to the last, so it
// depends only on the rows given and their order, never on which thread owns
// the group or how rows were split over calls.
#pragma once
#include <cstddef>

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

constexpr size_t kKeyLanes = 16;  // keys per transposed group (attention_scores.cpp)

template <class T>
void accumulate_attention_typed(const float* q, size_t ldq, size_t rows, const float* kt, size_t D,
                                size_t ncols, const size_t* len, const float* row_max,
                                const float* row_inv_sum, float* acc, size_t grp_begin,
                                size_t grp_end) {
  using V = typename T::V;
  constexpr size_t W = T::W, NV = kKeyLanes / W;
  // Rows per pass: eight independent accumulator chains keep both FMA ports busy
  // when a key group is one register; two registers a group leave room for four.
  constexpr size_t R = NV == 1 ? 8 : 4;
  static_assert(R * NV == 8, "eight accumulators");
  static_assert(kKeyLanes % W == 0, "a key group is whole vectors");
  for (size_t grp = grp_begin; grp < grp_end; ++grp) {
    const size_t t0 = grp * kKeyLanes;
    const size_t n = ncols - t0 < kKeyLanes ? ncols - t0 : kKeyLanes;
    const float* kg = kt + grp * kKeyLanes * D;
    float* out = acc + t0;
    V sum[NV];
    for (size_t v = 0; v < NV; ++v)
      sum[v] = n >= (v + 1) * W ? T::load(out + v * W)
               : n > v * W      ? T::load_n(out + v * W, n - v * W)
                                : T::zero();
    for (size_t i = 0; i < rows; i += R) {
      const size_t r = rows - i < R ? rows - i : R;
      bool any = false;
      for (size_t row = 0; row < r; ++row) any = any || len[i + row] > t0;
      if (!any) continue;
      // A last group of fewer rows repeats its last row; the copies are not
      // summed.
      const float* qr[R];
      for (size_t row = 0; row < R; ++row) qr[row] = q + (i + (row < r ? row : r - 1)) * ldq;
      // Eight accumulators, a<i> for row i / NV and key vector i % NV, named rather
      // than an array (GCC keeps an array of vectors in memory through the loop,
      // a store per FMA; see matmul_kernel.hpp).
#define VC_ACC_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define VC_ACC_DECLARE(i) V a##i = T::zero();
#define VC_ACC_FMA(i) a##i = T::fmadd(T::set1(qr[i / NV][d]), i % NV == 0 ? k0 : k1, a##i);
#define VC_ACC_STORE(i) T::store(&sc[i / NV][(i % NV) * W], a##i);
      VC_ACC_ALL(VC_ACC_DECLARE)
      for (size_t d = 0; d < D; ++d) {
        const V k0 = T::load(kg + d * kKeyLanes);
        const V k1 = NV > 1 ? T::load(kg + d * kKeyLanes + W) : k0;
        VC_ACC_ALL(VC_ACC_FMA)
      }
      alignas(64) float sc[R][kKeyLanes];
      VC_ACC_ALL(VC_ACC_STORE)
#undef VC_ACC_STORE
#undef VC_ACC_FMA
#undef VC_ACC_DECLARE
#undef VC_ACC_ALL
      for (size_t row = 0; row < r; ++row) {
        const size_t l = len[i + row];
        const size_t seen = l <= t0 ? 0 : (l - t0 < kKeyLanes ? l - t0 : kKeyLanes);
        if (seen == 0) continue;
        const V m = T::set1(row_max[i + row]), w = T::set1(row_inv_sum[i + row]);
        for (size_t v = 0; v < NV && seen > v * W; ++v) {
          const V s = T::load(&sc[row][v * W]);
          V p = T::mul(T::exp(T::sub(s, T::max(s, m))), w);
          if (seen < (v + 1) * W) p = T::zero_from(p, seen - v * W);
          sum[v] = T::add(sum[v], p);
        }
      }
    }
    for (size_t v = 0; v < NV; ++v) {
      if (n >= (v + 1) * W)
        T::store(out + v * W, sum[v]);
      else if (n > v * W)
        T::store_n(out + v * W, sum[v], n - v * W);
    }
  }
}

}  // namespace
}  // namespace vc::cpu

// Matmul y = x · W^T for bf16 weights on the AVX-512 path: f32 FMA over weight pairs.
//
// A bf16 value is the high half of an f32, so a 32-bit lane holding two stored
// weights (element 2j in its low half, 2j+1 in its high half) gives both as f32 with
// one instruction each: shifted left by 16 (element 2j) and masked to its high half
// (element 2j+1). A 64-byte load of 32 weights thus becomes two f32 vectors for two
// ALU operations, where widening 16 weights per vector (the generic kernel's
// load_bf16) costs a widening shuffle and a shift per 16. x is split to match once
// per call (matmul_split_pairs): per 32 elements, the 16 even ones, then the 16 odd
// ones. Operands stay exact (bf16 to f32 is exact; x is not rounded).
//
// How y[m, n] is computed -- the same for every element, whatever M, the tile the
// element lands in, or the thread count (batch invariance):
//   acc = 0 (16 f32 lanes)
//   for k = 0, 32, 64, ...:
//     acc = fma(x[m, k+2j],   w[n, k+2j],   acc)   (lane j; elements past K are 0,
//     acc = fma(x[m, k+2j+1], w[n, k+2j+1], acc)    weights by masked loads, x padded)
//   y[m, n] = reduce(acc) (+ bias[n])  -- the AVX-512 path's reduction tree
// Register tiles of up to 4 x rows by 4 weight rows hold independent accumulators,
// each exactly the computation above; the remainder tiles are the same template.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: its reduction and store are the path's own)
#include <type_traits>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {

using T = Avx512Simd;
constexpr size_t kPairs = 32;  // bf16 weights per 64-byte load

struct Tile {
  const float* x;    // first split x row of the tile (rows padded with zeros)
  size_t ldx;        // x row stride (floats, a multiple of 32)
  const uint16_t* w; // first weight row of the tile
  size_t ldw;        // weight row stride (elements)
  size_t K;
  const float* bias; // bias of the tile's first column, or nullptr
  float* y;          // y[first row, first column]
  size_t ldy;
  const uint16_t* pf;  // 4 weight rows to fetch ahead (a later tile's), or nullptr
  bool pf_l2;          // prefetch into L2, not L1 (matmul_weights_streamed)
};

// Named accumulators a<row><col> (an array of vectors would live in memory once a
// loop holds ISA builtins, as in matmul_kernel.hpp); unused ones vanish.
#define VC_PR_ROW(i, X) X(i, 0) X(i, 1) X(i, 2) X(i, 3)
#define VC_PR_ALL(X) VC_PR_ROW(0, X) VC_PR_ROW(1, X) VC_PR_ROW(2, X) VC_PR_ROW(3, X)
#define VC_PR_DECLARE(i, j) __m512 a##i##j = _mm512_setzero_ps();
// Row i's accumulators take the even elements, then the odd ones, of this step.
#define VC_PR_FMA_ROW(i)                                                   \
  if constexpr (i < MR) {                                                  \
    const __m512 xe = _mm512_loadu_ps(x##i + k);                           \
    const __m512 xo = _mm512_loadu_ps(x##i + k + T::W);                    \
    if constexpr (NR > 0) a##i##0 = _mm512_fmadd_ps(xo, o0, _mm512_fmadd_ps(xe, e0, a##i##0)); \
    if constexpr (NR > 1) a##i##1 = _mm512_fmadd_ps(xo, o1, _mm512_fmadd_ps(xe, e1, a##i##1)); \
    if constexpr (NR > 2) a##i##2 = _mm512_fmadd_ps(xo, o2, _mm512_fmadd_ps(xe, e2, a##i##2)); \
    if constexpr (NR > 3) a##i##3 = _mm512_fmadd_ps(xo, o3, _mm512_fmadd_ps(xe, e3, a##i##3)); \
  }
#define VC_PR_STORE_ROW(i)                                                                  \
  if constexpr (i < MR) {                                                                   \
    T::store4(t.y + size_t(i) * t.ldy, T::reduce4(a##i##0, a##i##1, a##i##2, a##i##3), t.bias, \
              size_t(NR));                                                                  \
  }

/// Weights k..k+31 of a row as f32: even elements, odd elements.
inline void split_pairs(__m512i raw, __m512& even, __m512& odd) {
  even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(int(0xffff0000u))));
}
struct Full {};  // all 32 lanes
inline void load_pairs(const uint16_t* row, size_t k, Full, __m512& even, __m512& odd) {
  split_pairs(_mm512_loadu_si512(row + k), even, odd);
}
/// Lanes not in m (past K) read as 0.
inline void load_pairs(const uint16_t* row, size_t k, __mmask32 m, __m512& even, __m512& odd) {
  split_pairs(_mm512_maskz_loadu_epi16(m, row + k), even, odd);
}

template <int MR, int NR>
inline void tile(const Tile& t) {
  static_assert(MR >= 1 && MR <= 4 && NR >= 1 && NR <= 4, "tiles are at most 4 x 4");
  // Rows outside the tile alias row 0 and are never loaded.
  const float* x0 = t.x;
  const float* x1 = t.x + (MR > 1 ? t.ldx : 0);
  const float* x2 = t.x + (MR > 2 ? 2 * t.ldx : 0);
  const float* x3 = t.x + (MR > 3 ? 3 * t.ldx : 0);
  const uint16_t* r0 = t.w;
  const uint16_t* r1 = t.w + (NR > 1 ? t.ldw : 0);
  const uint16_t* r2 = t.w + (NR > 2 ? 2 * t.ldw : 0);
  const uint16_t* r3 = t.w + (NR > 3 ? 3 * t.ldw : 0);
  (void)x1, (void)x2, (void)x3, (void)r1, (void)r2, (void)r3;
  VC_PR_ALL(VC_PR_DECLARE)
  // One step: 32 weights of each row (mask m: lanes past K read as 0) into the tile.
#define VC_PR_STEP(k, m)                                                               \
  {                                                                                    \
    __m512 e0, o0, e1 = T::zero(), o1 = T::zero(), e2 = T::zero(), o2 = T::zero(),     \
                   e3 = T::zero(), o3 = T::zero();                                     \
    load_pairs(r0, k, m, e0, o0);                                                      \
    if constexpr (NR > 1) load_pairs(r1, k, m, e1, o1);                                \
    if constexpr (NR > 2) load_pairs(r2, k, m, e2, o2);                                \
    if constexpr (NR > 3) load_pairs(r3, k, m, e3, o3);                                \
    (void)e1, (void)o1, (void)e2, (void)o2, (void)e3, (void)o3;                        \
    VC_PR_FMA_ROW(0) VC_PR_FMA_ROW(1) VC_PR_FMA_ROW(2) VC_PR_FMA_ROW(3)                \
  }
  const size_t full = t.K / kPairs * kPairs;
  constexpr Full kAll{};
  if (t.pf != nullptr) {
    // The 4 rows ahead are 8K contiguous bytes: fetch them in address order, 256
    // bytes per step (one step reads 256 bytes of this tile's rows). One stream in
    // order reads faster than four side by side (M = 1, one thread, 256 MiB: 25
    // against 17 GB/s); no effect on bits.
    const char* ahead = reinterpret_cast<const char*>(t.pf);
    for (size_t k = 0; k < full; k += kPairs) {
      prefetch_weights(ahead + 4 * k * sizeof(uint16_t), 256, t.pf_l2);
      VC_PR_STEP(k, kAll)
    }
  } else {
    for (size_t k = 0; k < full; k += kPairs) VC_PR_STEP(k, kAll)
  }
  if (full < t.K) {  // K tail: lanes past K are 0 in both operands
    const __mmask32 m = __mmask32((1u << (t.K - full)) - 1u);
    const size_t k = full;
    VC_PR_STEP(k, m)
  }
#undef VC_PR_STEP
  VC_PR_STORE_ROW(0)
  VC_PR_STORE_ROW(1)
  VC_PR_STORE_ROW(2)
  VC_PR_STORE_ROW(3)
}

#undef VC_PR_ROW
#undef VC_PR_ALL
#undef VC_PR_DECLARE
#undef VC_PR_FMA_ROW
#undef VC_PR_STORE_ROW

template <int MR, int NR = 4>
inline void tile_nr(int nr, const Tile& t) {
  if constexpr (NR == 1) {
    tile<MR, 1>(t);
  } else {
    if (nr == NR) return tile<MR, NR>(t);
    tile_nr<MR, NR - 1>(nr, t);
  }
}

template <int MR = 4>
inline void tile_any(int mr, int nr, const Tile& t) {
  if constexpr (MR == 1) {
    tile_nr<1>(nr, t);
  } else {
    if (mr == MR) return tile_nr<MR>(nr, t);
    tile_any<MR - 1>(mr, nr, t);
  }
}

inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

}  // namespace

size_t matmul_pairs_ld(size_t K) { return (K + kPairs - 1) / kPairs * kPairs; }

void matmul_split_pairs(const float* x, size_t M, size_t K, float* out) {
  const size_t ld = matmul_pairs_ld(K);
  // Within 32 elements: the even ones (lanes 0, 2, ..., 30 of the pair of vectors)
  // to the first 16 floats, the odd ones to the next 16.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (size_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    float* dst = out + m * ld;
    for (size_t k = 0; k < ld; k += kPairs) {
      const size_t left0 = k < K ? K - k : 0;
      const size_t left1 = left0 > T::W ? left0 - T::W : 0;
      // Elements past K load as 0: the padding that meets the masked weights.
      const __m512 lo = T::load_n(src + k, left0 < T::W ? left0 : T::W);
      const __m512 hi = T::load_n(src + k + T::W, left1 < T::W ? left1 : T::W);
      _mm512_storeu_ps(dst + k, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_storeu_ps(dst + k + T::W, _mm512_permutex2var_ps(lo, odd, hi));
    }
  }
}

void matmul_cols_avx512_pairs(const MatmulJob& job, size_t n0, size_t n1, size_t block_rows) {
  const size_t K = job.K;
  const bool streamed = matmul_weights_streamed(job);
  const auto* w = static_cast<const uint16_t*>(job.w);
  // Blocks of weight rows small enough to stay in L2 while every x tile (in L1)
  // passes over them: each weight byte comes from memory once per call.
  for (size_t nb = n0; nb < n1; nb += block_rows) {
    const size_t rows = min_size(block_rows, n1 - nb);
    for (size_t m = 0; m < job.M; m += 4) {
      const int mr = int(min_size(4, job.M - m));
      for (size_t n = 0; n < rows; n += 4) {
        const int nr = int(min_size(4, rows - n));
        // While the first x tile passes, fetch the next weight tile ahead: four rows
        // read side by side are four short streams that the hardware prefetcher
        // barely follows (the tile loop fetches the next tile in address order).
        const size_t next = nb + n + 4;
        const uint16_t* pf = (m == 0 && next + 4 <= n1) ? w + next * K : nullptr;
        const Tile t{job.xp + m * job.ldxp, job.ldxp, w + (nb + n) * K, K, K,
                     job.bias ? job.bias + nb + n : nullptr, job.y + m * job.N + nb + n, job.N, pf,
                     streamed};
        tile_any(mr, nr, t);
      }
    }
  }
}

}  // namespace vc::cpu

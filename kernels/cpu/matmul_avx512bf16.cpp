// Matmul y = x · W^T for bf16 weights on the AVX512_BF16 path: x is rounded to bf16
// once per call and VDPBF16PS multiplies bf16 pairs into f32 accumulators, 32
// multiply-adds per instruction, weights used as stored (no conversion, no packing).
//
// How y[m, n] is computed -- the same for every element, whatever M, the tile the
// element lands in, or the thread count (batch invariance):
//   xb = bf16(x[m, :]) (round to nearest even; subnormals become 0), zero-padded
//        to a multiple of 32 (matmul_round_rows_bf16, once per call)
//   acc = 0 (16 f32 lanes)
//   for k = 0, 32, 64, ...:  acc = dpbf16(acc, xb[k:k+32], w[n, k:k+32])
//        lane j adds the products of elements k+2j+1 and k+2j (the instruction's
//        fixed order; products of two bf16 are exact in f32); weights past K are
//        read as 0 (masked loads) and subnormal weights count as 0
//   y[m, n] = reduce(acc) (+ bias[n])  -- the AVX-512 path's reduction tree
// Register tiles of up to 6 x rows by 4 weight rows hold independent accumulators,
// each exactly the computation above; the remainder tiles are the same template.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: its reduction and store are the path's own)
#if !defined(__AVX512BF16__)
#error "matmul_avx512bf16.cpp is compiled with -mavx512bf16"
#endif
#include <type_traits>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {

using T = Avx512Simd;
constexpr size_t kPair = 32;  // bf16 elements per zmm register

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/// 32 weights at p + k, lanes past K as 0.
inline __m512bh load_w(const uint16_t* p, size_t k, __mmask32 m) {
  return as_bh(_mm512_maskz_loadu_epi16(m, p + k));
}

struct Tile {
  const uint16_t* x;  // first bf16 x row of the tile (rows padded with zeros)
  size_t ldx;         // x row stride (elements, a multiple of 32)
  const uint16_t* w;  // first weight row of the tile
  size_t ldw;         // weight row stride (elements)
  size_t K;
  const float* bias;  // bias of the tile's first column, or nullptr
  float* y;           // y[first row, first column]
  size_t ldy;
  const uint16_t* pf;  // the weight rows to fetch ahead (the next tile's), or nullptr
  bool pf_l2;          // prefetch into L2, not L1 (matmul_weights_streamed)
};

// Named accumulators a<row><col> (an array of vectors would live in memory once a
// loop holds ISA builtins, as in matmul_kernel.hpp); unused ones vanish.
#define VC_BF_ROW(i, X) X(i, 0) X(i, 1) X(i, 2) X(i, 3)
#define VC_BF_ALL(X) \
  VC_BF_ROW(0, X) VC_BF_ROW(1, X) VC_BF_ROW(2, X) VC_BF_ROW(3, X) VC_BF_ROW(4, X) VC_BF_ROW(5, X)
#define VC_BF_DECLARE(i, j) __m512 a##i##j = _mm512_setzero_ps();
#define VC_BF_DP_ROW(i)                                                   \
  if constexpr (i < MR) {                                                 \
    const __m512bh xv = as_bh(_mm512_loadu_si512(x##i + k));              \
    if constexpr (NR > 0) a##i##0 = _mm512_dpbf16_ps(a##i##0, xv, w0);    \
    if constexpr (NR > 1) a##i##1 = _mm512_dpbf16_ps(a##i##1, xv, w1);    \
    if constexpr (NR > 2) a##i##2 = _mm512_dpbf16_ps(a##i##2, xv, w2);    \
    if constexpr (NR > 3) a##i##3 = _mm512_dpbf16_ps(a##i##3, xv, w3);    \
  }
#define VC_BF_STORE_ROW(i)                                                                  \
  if constexpr (i < MR) {                                                                   \
    T::store4(t.y + size_t(i) * t.ldy, T::reduce4(a##i##0, a##i##1, a##i##2, a##i##3), t.bias, \
              size_t(NR));                                                                  \
  }

// Six x rows by four weight rows: 24 accumulators, 4 weight vectors and an x vector
// in the 32 registers; 10 loads per 24 products (4 x 4: 8 per 16).
constexpr int kTileRows = 6;

template <int MR, int NR>
inline void tile(const Tile& t) {
  static_assert(MR >= 1 && MR <= kTileRows && NR >= 1 && NR <= 4, "tiles are at most 6 x 4");
  // Rows outside the tile alias row 0 and are never loaded.
  const uint16_t* x0 = t.x;
  const uint16_t* x1 = t.x + (MR > 1 ? t.ldx : 0);
  const uint16_t* x2 = t.x + (MR > 2 ? 2 * t.ldx : 0);
  const uint16_t* x3 = t.x + (MR > 3 ? 3 * t.ldx : 0);
  const uint16_t* x4 = t.x + (MR > 4 ? 4 * t.ldx : 0);
  const uint16_t* x5 = t.x + (MR > 5 ? 5 * t.ldx : 0);
  const uint16_t* r0 = t.w;
  const uint16_t* r1 = t.w + (NR > 1 ? t.ldw : 0);
  const uint16_t* r2 = t.w + (NR > 2 ? 2 * t.ldw : 0);
  const uint16_t* r3 = t.w + (NR > 3 ? 3 * t.ldw : 0);
  (void)x1, (void)x2, (void)x3, (void)x4, (void)x5, (void)r1, (void)r2, (void)r3;
  VC_BF_ALL(VC_BF_DECLARE)
  const __m512bh zero = as_bh(_mm512_setzero_si512());
  for (size_t k = 0; k < t.K; k += kPair) {
    const size_t left = t.K - k;
    const __mmask32 m = left >= kPair ? __mmask32(~0u) : __mmask32((1u << left) - 1u);
    if (t.pf != nullptr) {
      // The next tile's 4 rows are 8K contiguous bytes: fetched in address order,
      // 256 bytes per step (what one step reads of this tile), into L2 for weights
      // from memory (matmul_weights_streamed); no effect on bits.
      prefetch_weights(reinterpret_cast<const char*>(t.pf) + 4 * k * sizeof(uint16_t), 256,
                       t.pf_l2);
    }
    const __m512bh w0 = load_w(r0, k, m);
    const __m512bh w1 = NR > 1 ? load_w(r1, k, m) : zero;
    const __m512bh w2 = NR > 2 ? load_w(r2, k, m) : zero;
    const __m512bh w3 = NR > 3 ? load_w(r3, k, m) : zero;
    (void)w1, (void)w2, (void)w3;
    VC_BF_DP_ROW(0) VC_BF_DP_ROW(1) VC_BF_DP_ROW(2) VC_BF_DP_ROW(3) VC_BF_DP_ROW(4) VC_BF_DP_ROW(5)
  }
  VC_BF_STORE_ROW(0)
  VC_BF_STORE_ROW(1)
  VC_BF_STORE_ROW(2)
  VC_BF_STORE_ROW(3)
  VC_BF_STORE_ROW(4)
  VC_BF_STORE_ROW(5)
}

#undef VC_BF_ROW
#undef VC_BF_ALL
#undef VC_BF_DECLARE
#undef VC_BF_DP_ROW
#undef VC_BF_STORE_ROW

template <int MR, int NR = 4>
inline void tile_nr(int nr, const Tile& t) {
  if constexpr (NR == 1) {
    tile<MR, 1>(t);
  } else {
    if (nr == NR) return tile<MR, NR>(t);
    tile_nr<MR, NR - 1>(nr, t);
  }
}

template <int MR = kTileRows>
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

// One cache line more than K needs: with K a multiple of 2048 (a 4 KiB row), the six
// rows of an x tile would otherwise sit in one L1 set at every step, beside the four
// weight rows' lines (4 KiB apart too): 10 of the set's 12 ways, and x lines were
// evicted while the weight tiles streamed past. The padding moves each x row to the
// next set; nothing reads it. 2-core AMD EPYC (Zen 5), N 8192 / 16384, K 2048 and
// 2048 x 8192, medians of 5 alternated runs, 2 threads: M = 33 and 64 rose 14-21%
// (e.g. 375 -> 453 GFLOP/s at M 64, N 8192, K 2048); M <= 17 unchanged; whole 1B-shape
// passes of 33-64 rows 1-10% sooner (README, "Cost of a verify pass"). Bits unchanged.
// Padded only where the stride is a multiple of 1 KiB (K a multiple of 512): other
// strides already spread the rows over the sets, and K = 2016 padded would land on
// 4 KiB exactly.
size_t matmul_bf16_ld(size_t K) {
  const size_t ld = (K + kPair - 1) / kPair * kPair;
  return ld * sizeof(uint16_t) % 1024 == 0 ? ld + kPair : ld;
}

void matmul_round_rows_bf16(const float* x, size_t M, size_t K, uint16_t* out) {
  const size_t ld = matmul_bf16_ld(K);
  for (size_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    uint16_t* dst = out + m * ld;
    for (size_t k = 0; k < ld; k += T::W) {
      const size_t left = k < K ? K - k : 0;
      const __mmask16 lm = left >= T::W ? __mmask16(0xffff) : T::lane_mask(left);
      // Lanes past K load as +0 and convert to +0: the padding the kernel reads.
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lm, src + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)h);
    }
  }
}

void matmul_cols_avx512bf16(const MatmulJob& job, size_t n0, size_t n1, size_t block_rows) {
  const size_t K = job.K;
  const bool streamed = matmul_weights_streamed(job);
  const auto* w = static_cast<const uint16_t*>(job.w);
  // Blocks of weight rows small enough to stay in L2 while every x tile (in L1)
  // passes over them: each weight byte comes from memory once per call.
  for (size_t nb = n0; nb < n1; nb += block_rows) {
    const size_t rows = min_size(block_rows, n1 - nb);
    for (size_t m = 0; m < job.M; m += kTileRows) {
      const int mr = int(min_size(kTileRows, job.M - m));
      for (size_t n = 0; n < rows; n += 4) {
        const int nr = int(min_size(4, rows - n));
        // While the first x tile passes, fetch the next weight tile ahead: four rows
        // of K read side by side are four short streams that the hardware prefetcher
        // barely follows (decode at M = 1 read 23 GB/s without this, 28 with it).
        const size_t next = nb + n + 4;
        const uint16_t* pf = (m == 0 && next + 4 <= n1) ? w + next * K : nullptr;
        const Tile t{job.xb + m * job.ldxb, job.ldxb, w + (nb + n) * K, K, K,
                     job.bias ? job.bias + nb + n : nullptr, job.y + m * job.N + nb + n, job.N, pf,
                     streamed};
        tile_any(mr, nr, t);
      }
    }
  }
}

}  // namespace vc::cpu

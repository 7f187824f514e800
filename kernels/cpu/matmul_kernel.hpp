// Internal: the matmul arithmetic, generic over a SIMD traits type (simd_scalar.hpp,
// simd_avx2.hpp, simd_avx512.hpp). Included only by matmul_{scalar,avx2,avx512}.cpp.
//
// How y[m, n] is computed -- the same for every element, whatever M, the tile the
// element lands in, or the thread count (batch invariance):
//   acc = 0 (one vector of W lanes)
//   for k = 0, W, 2W, ...:  acc = fma(x[m, k:k+W], w[n, k:k+W], acc)
//   the last partial step loads lanes past K as 0 (masked loads), both x and w
//   y[m, n] = reduce(acc) (+ bias[n])  -- the traits' fixed reduction tree, then
//                                         one f32 addition of the bias
// Register tiles of MR x-rows by NR weight rows hold MR*NR independent accumulators
// (enough to hide the FMA latency and reuse every load MR or NR times), but each
// accumulator is exactly the per-element computation above; the remainder tiles
// are the same template with smaller MR / NR. Converting weights to f32 (packing)
// is exact, so packed and direct loads give identical operands.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

template <DType WT>
using WElem = std::conditional_t<WT == DType::f32, float, uint16_t>;

/// W lanes of a weight row starting at element i, converted to f32.
template <class T, DType WT>
inline typename T::V load_w(const void* row, size_t i) {
  const auto* p = static_cast<const WElem<WT>*>(row) + i;
  if constexpr (WT == DType::f32) {
    return T::load(p);
  } else if constexpr (WT == DType::bf16) {
    return T::load_bf16(p);
  } else {
    return T::load_f16(p);
  }
}

/// As load_w, lanes >= n are 0 (and not read).
template <class T, DType WT>
inline typename T::V load_w_n(const void* row, size_t i, size_t n) {
  const auto* p = static_cast<const WElem<WT>*>(row) + i;
  if constexpr (WT == DType::f32) {
    return T::load_n(p, n);
  } else if constexpr (WT == DType::bf16) {
    return T::load_bf16_n(p, n);
  } else {
    return T::load_f16_n(p, n);
  }
}

/// As load_w with a lane mask (masked-loop paths only).
template <class T, DType WT, class Mask>
inline typename T::V load_w_m(const void* row, size_t i, Mask m) {
  const auto* p = static_cast<const WElem<WT>*>(row) + i;
  if constexpr (WT == DType::f32) {
    return T::load_m(p, m);
  } else if constexpr (WT == DType::bf16) {
    return T::load_bf16_m(p, m);
  } else {
    return T::load_f16_m(p, m);
  }
}

/// Operands of one register tile.
struct TileArgs {
  const float* x;    // first x row of the tile
  size_t ldx;        // x row stride (floats)
  const void* w;     // first weight row of the tile
  size_t ldw;        // weight row stride (elements of the weight type)
  size_t K;
  const float* bias; // bias of the tile's first column, or nullptr
  float* y;          // y[first row, first column]
  size_t ldy;        // y row stride
  const char* pf;    // weight rows to fetch ahead (the next tile's), or nullptr
  bool pf_l2;        // prefetch into L2, not L1 (matmul_weights_streamed)
};

// The accumulators of a tile are 16 named variables, a<row><col>, not an array:
// GCC keeps an array of vectors in memory as soon as a loop holds an ISA builtin
// (the masked loads), costing a store per FMA. Unused ones (row >= MR or col >= NR)
// are never touched and vanish.
#define VC_MM_ACC_ROW(i, X) X(i, 0) X(i, 1) X(i, 2) X(i, 3)
#define VC_MM_FOR_EACH_ACC(X) \
  VC_MM_ACC_ROW(0, X) VC_MM_ACC_ROW(1, X) VC_MM_ACC_ROW(2, X) VC_MM_ACC_ROW(3, X)
#define VC_MM_DECLARE(i, j) V a##i##j = T::zero();
// acc(i, j) += x row i * weight row j for the live accumulators of row i: x row i
// is loaded right before its FMAs, so only one x vector is live at a time (the
// AVX2 4 x 3 tile needs 12 + 3 + 1 = all 16 registers).
#define VC_MM_FMA_ROW(i, lx, k)                                          \
  if constexpr (i < MR) {                                                \
    const V x = lx(C<i>{}, k);                                           \
    if constexpr (NR > 0) a##i##0 = T::fmadd(x, w0, a##i##0);            \
    if constexpr (NR > 1) a##i##1 = T::fmadd(x, w1, a##i##1);            \
    if constexpr (NR > 2) a##i##2 = T::fmadd(x, w2, a##i##2);            \
    if constexpr (NR > 3) a##i##3 = T::fmadd(x, w3, a##i##3);            \
  }
// One K step: lw(J, k) / lx(I, k) load weight row J / x row I at k (as 0 when
// the row is outside the tile, or lanes past K).
#define VC_MM_STEP(lw, lx, k)                                                           \
  {                                                                                     \
    const V w0 = lw(C<0>{}, k), w1 = lw(C<1>{}, k), w2 = lw(C<2>{}, k), w3 = lw(C<3>{}, k); \
    VC_MM_FMA_ROW(0, lx, k) VC_MM_FMA_ROW(1, lx, k) VC_MM_FMA_ROW(2, lx, k)             \
    VC_MM_FMA_ROW(3, lx, k)                                                             \
  }
// y row i = reduce(a<i>0..a<i>3) (+ bias); padding columns reduce zeros.
#define VC_MM_STORE_ROW(i)                                                          \
  if constexpr (i < MR) {                                                           \
    T::store4(a.y + size_t(i) * a.ldy, T::reduce4(a##i##0, a##i##1, a##i##2, a##i##3), \
              a.bias, size_t(NR));                                                  \
  }

template <int I>
using C = std::integral_constant<int, I>;

/// Fetches this step's share of the next tile's weights (a.pf), when there is one:
/// its NR rows are NR * K contiguous elements, fetched in address order, NR * W
/// elements per step (what one step reads of this tile). One stream in order reads
/// faster than NR side by side (the hardware prefetcher follows it).
template <DType WT, int NR, size_t W>
inline void prefetch_rows(const TileArgs& a, size_t k) {
  if (a.pf == nullptr) return;
  constexpr size_t bytes = size_t(NR) * W * sizeof(WElem<WT>);
  prefetch_weights(a.pf + size_t(NR) * k * sizeof(WElem<WT>), bytes, a.pf_l2);
}

/// y[0:MR, 0:NR] of the tile: MR*NR accumulators, each the per-element computation.
template <class T, DType WT, int MR, int NR>
inline void tile(const TileArgs& a) {
  static_assert(MR >= 1 && MR <= 4 && NR >= 1 && NR <= 4, "tiles are at most 4 x 4");
  using V = typename T::V;
  constexpr size_t W = T::W;
  const size_t K = a.K;
  const char* wrow[4];
  const float* xrow[4];
  for (int j = 0; j < 4; ++j) {
    const int jj = j < NR ? j : 0;  // rows outside the tile are never loaded
    wrow[j] = static_cast<const char*>(a.w) + size_t(jj) * a.ldw * sizeof(WElem<WT>);
    const int ii = j < MR ? j : 0;
    xrow[j] = a.x + size_t(ii) * a.ldx;
  }
  VC_MM_FOR_EACH_ACC(VC_MM_DECLARE)

  if constexpr (T::kMaskedLoop) {
    // One loop, every step masked (all lanes until the tail).
    for (size_t k = 0; k < K; k += W) {
      const auto mask = T::mask_upto(K - k);
      auto lw = [=](auto J, size_t kk) {
        if constexpr (J() < NR) return load_w_m<T, WT>(wrow[J()], kk, mask);
        else return T::zero();
      };
      auto lx = [=](auto I, size_t kk) {
        if constexpr (I() < MR) return T::load_m(xrow[I()] + kk, mask);
        else return T::zero();
      };
      prefetch_rows<WT, NR, W>(a, k);
      VC_MM_STEP(lw, lx, k)
    }
  } else {
    auto lw = [=](auto J, size_t kk) {
      if constexpr (J() < NR) return load_w<T, WT>(wrow[J()], kk);
      else return T::zero();
    };
    auto lx = [=](auto I, size_t kk) {
      if constexpr (I() < MR) return T::load(xrow[I()] + kk);
      else return T::zero();
    };
    size_t k = 0;
    for (; k + W <= K; k += W) {
      prefetch_rows<WT, NR, W>(a, k);
      VC_MM_STEP(lw, lx, k)
    }
    if (k < K) {  // K tail: lanes past K are 0 in both operands
      const size_t n = K - k;
      auto lwn = [=](auto J, size_t kk) {
        if constexpr (J() < NR) return load_w_n<T, WT>(wrow[J()], kk, n);
        else return T::zero();
      };
      auto lxn = [=](auto I, size_t kk) {
        if constexpr (I() < MR) return T::load_n(xrow[I()] + kk, n);
        else return T::zero();
      };
      VC_MM_STEP(lwn, lxn, k)
    }
  }

  // y = reduce(acc) (+ bias): four outputs per reduction, stored as one vector.
  VC_MM_STORE_ROW(0)
  VC_MM_STORE_ROW(1)
  VC_MM_STORE_ROW(2)
  VC_MM_STORE_ROW(3)
}

#undef VC_MM_ACC_ROW
#undef VC_MM_FOR_EACH_ACC
#undef VC_MM_DECLARE
#undef VC_MM_FMA_ROW
#undef VC_MM_STEP
#undef VC_MM_STORE_ROW

/// Runtime tile shape -> template instance (nr <= NR).
template <class T, DType WT, int MR, int NR = T::NR>
inline void tile_nr(int nr, const TileArgs& a) {
  if constexpr (NR == 1) {
    tile<T, WT, MR, 1>(a);
  } else {
    if (nr == NR) return tile<T, WT, MR, NR>(a);
    tile_nr<T, WT, MR, NR - 1>(nr, a);
  }
}

template <class T, DType WT, int MR = T::MR>
inline void tile_any(int mr, int nr, const TileArgs& a) {
  if constexpr (MR == 1) {
    tile_nr<T, WT, 1>(nr, a);
  } else {
    if (mr == MR) return tile_nr<T, WT, MR>(nr, a);
    tile_any<T, WT, MR - 1>(mr, nr, a);
  }
}

inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/// Direct: weights read in their storage type. Blocks of weight rows (about 192 KiB,
/// kept in L2) are the outer loop, every x row tile passes over a block, and inside
/// the pass weight tiles are innermost, so an x tile stays in L1 while the block's
/// tiles stream past it.
template <class T, DType WT>
void cols_direct(const MatmulJob& job, size_t n0, size_t n1) {
  const size_t esz = sizeof(WElem<WT>);
  const size_t K = job.K;
  const size_t block = [&] {
    const size_t rows = (size_t(192) << 10) / ((K > 0 ? K : 1) * esz);
    return rows < T::NR ? size_t(T::NR) : rows / T::NR * T::NR;
  }();
  const char* w = static_cast<const char*>(job.w);
  const bool streamed = matmul_weights_streamed(job);
  for (size_t nb = n0; nb < n1; nb += block) {
    const size_t ne = min_size(nb + block, n1);
    for (size_t m = 0; m < job.M; m += T::MR) {
      const int mr = int(min_size(T::MR, job.M - m));
      for (size_t n = nb; n < ne; n += T::NR) {
        const int nr = int(min_size(T::NR, ne - n));
        // Fetch the next weight tile ahead while this one is read (first x rows only:
        // later ones find the block in cache). NR rows read side by side are NR short
        // streams the hardware prefetcher barely follows; at M = 1 (decode) this took
        // the AVX-512 path from 15 to 27 GB/s on one thread. Prefetches change no bits.
        const size_t next = n + T::NR;
        const char* pf = (m == 0 && next + T::NR <= n1) ? w + next * K * esz : nullptr;
        const TileArgs a{job.x + m * K, K, w + n * K * esz, K, K,
                         job.bias ? job.bias + n : nullptr, job.y + m * job.N + n, job.N, pf,
                         streamed};
        tile_any<T, WT>(mr, nr, a);
      }
    }
  }
}

/// Packed: a block of weight rows is converted to f32 once (exact) and reused for
/// all M rows: x tiles stream through L1 while the block sits in L2.
template <class T, DType WT>
void cols_packed(const MatmulJob& job, size_t n0, size_t n1, float* pack, size_t pack_rows) {
  constexpr size_t W = T::W;
  const size_t K = job.K, ld = matmul_pack_ld(K), esz = sizeof(WElem<WT>);
  for (size_t nb = n0; nb < n1; nb += pack_rows) {
    const size_t rows = min_size(pack_rows, n1 - nb);
    for (size_t r = 0; r < rows; ++r) {
      const void* src = static_cast<const char*>(job.w) + (nb + r) * K * esz;
      float* dst = pack + r * ld;
      size_t k = 0;
      for (; k + W <= K; k += W) T::store(dst + k, load_w<T, WT>(src, k));
      if (k < K) T::store_n(dst + k, load_w_n<T, WT>(src, k, K - k), K - k);
    }
    for (size_t m = 0; m < job.M; m += T::MR) {
      const int mr = int(min_size(T::MR, job.M - m));
      for (size_t n = 0; n < rows; n += T::NR) {
        const int nr = int(min_size(T::NR, rows - n));
        const TileArgs a{job.x + m * K, K, pack + n * ld, ld, K,
                         job.bias ? job.bias + nb + n : nullptr, job.y + m * job.N + nb + n,
                         job.N, nullptr, false};
        tile_any<T, DType::f32>(mr, nr, a);
      }
    }
  }
}

template <class T>
void matmul_cols(const MatmulJob& job, size_t n0, size_t n1, float* pack, size_t pack_rows) {
  const bool packed = pack_rows > 0 && pack != nullptr && job.wt != DType::f32;
  switch (job.wt) {
    case DType::f32:
      return cols_direct<T, DType::f32>(job, n0, n1);
    case DType::bf16:
      return packed ? cols_packed<T, DType::bf16>(job, n0, n1, pack, pack_rows)
                    : cols_direct<T, DType::bf16>(job, n0, n1);
    case DType::f16:
      return packed ? cols_packed<T, DType::f16>(job, n0, n1, pack, pack_rows)
                    : cols_direct<T, DType::f16>(job, n0, n1);
  }
}

}  // namespace
}  // namespace vc::cpu

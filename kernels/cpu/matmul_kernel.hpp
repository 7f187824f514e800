// Internal: the matmul arithmetic, generic over a SIMD traits type (simd_scalar.hpp,
// simd_avx2.hpp, simd_avx512.hpp). Included only by matmul_{scalar,avx2,avx512}.cpp.
//
// How y[m, n] is computed -- the same for every element, whatever M, the tile the
// element lands in, or the thread count (batch invariance):
//   acc = 0 (one vector of W lanes)
//   for k = 0, W, 2W, ...:  acc = fma(x[m, k:k+W], w[n, k:k+W], acc)
//   the last partial step loads lanes past K as 0 (masked loads), both x and w
//   y[m, n] = reduce(acc) (+ bias[n])  -- the traits' fixed reduction tree
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
};

/// y[0:MR, 0:NR] of the tile: MR*NR accumulators, each the per-element computation.
template <class T, DType WT, int MR, int NR>
inline void tile(const TileArgs& a) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  const size_t K = a.K;
  const char* wrow[NR];
  for (int j = 0; j < NR; ++j) {
    wrow[j] = static_cast<const char*>(a.w) + size_t(j) * a.ldw * sizeof(WElem<WT>);
  }
  V acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = T::zero();

  size_t k = 0;
  for (; k + W <= K; k += W) {
    V wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = load_w<T, WT>(wrow[j], k);
    for (int i = 0; i < MR; ++i) {
      const V xv = T::load(a.x + size_t(i) * a.ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = T::fmadd(xv, wv[j], acc[i][j]);
    }
  }
  if (k < K) {  // K tail: lanes past K are 0 in both operands
    const size_t n = K - k;
    V wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = load_w_n<T, WT>(wrow[j], k, n);
    for (int i = 0; i < MR; ++i) {
      const V xv = T::load_n(a.x + size_t(i) * a.ldx + k, n);
      for (int j = 0; j < NR; ++j) acc[i][j] = T::fmadd(xv, wv[j], acc[i][j]);
    }
  }

  for (int i = 0; i < MR; ++i) {
    float* yrow = a.y + size_t(i) * a.ldy;
    for (int j0 = 0; j0 < NR; j0 += 4) {
      float s[4];
      const V z = T::zero();
      T::reduce4(acc[i][j0], j0 + 1 < NR ? acc[i][j0 + 1] : z, j0 + 2 < NR ? acc[i][j0 + 2] : z,
                 j0 + 3 < NR ? acc[i][j0 + 3] : z, s);
      for (int j = j0; j < NR && j < j0 + 4; ++j) {
        yrow[j] = a.bias ? s[j - j0] + a.bias[j] : s[j - j0];
      }
    }
  }
}

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

/// Direct: weights read in their storage type. Weight tiles outermost, so a tile's
/// rows stay in L1 while every x row block passes over them.
template <class T, DType WT>
void cols_direct(const MatmulJob& job, size_t n0, size_t n1) {
  const size_t esz = sizeof(WElem<WT>);
  for (size_t n = n0; n < n1; n += T::NR) {
    const int nr = int(min_size(T::NR, n1 - n));
    for (size_t m = 0; m < job.M; m += T::MR) {
      const int mr = int(min_size(T::MR, job.M - m));
      const TileArgs a{job.x + m * job.K, job.K,
                       static_cast<const char*>(job.w) + n * job.K * esz, job.K, job.K,
                       job.bias ? job.bias + n : nullptr, job.y + m * job.N + n, job.N};
      tile_any<T, WT>(mr, nr, a);
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
                         job.N};
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

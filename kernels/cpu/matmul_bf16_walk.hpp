// Internal: how the bf16-weight kernels (matmul_pairs_avx512.cpp and
// matmul_avx512bf16.cpp) walk a range of output columns, and the run-time tile shape
// to template instance step. Each kernel supplies a type with
//   Tile                                      its register tile's operands
//   template <int MR, int NR> run(const Tile&)  y of one MR x NR tile
//   make(job, m, n, pf)                       the Tile at x row m, weight row n
// The walk changes no bits: every output element is computed by its tile alone.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// Runtime tile shape -> Kernel::run<MR, NR> (nr <= NR).
template <class Kernel, int MR, int NR = 4>
inline void bf16_tile_nr(int nr, const typename Kernel::Tile& t) {
  if constexpr (NR == 1) {
    Kernel::template run<MR, 1>(t);
  } else {
    if (nr == NR) return Kernel::template run<MR, NR>(t);
    bf16_tile_nr<Kernel, MR, NR - 1>(nr, t);
  }
}

template <class Kernel, int MR = 4>
inline void bf16_tile_any(int mr, int nr, const typename Kernel::Tile& t) {
  if constexpr (MR == 1) {
    bf16_tile_nr<Kernel, 1>(nr, t);
  } else {
    if (mr == MR) return bf16_tile_nr<Kernel, MR>(nr, t);
    bf16_tile_any<Kernel, MR - 1>(mr, nr, t);
  }
}

/// y[:, n0:n1): blocks of block_rows weight rows small enough to stay in L2 while
/// every 4-row x tile (in L1) passes over them, so each weight byte comes from memory
/// once per call; 4 x 4 tiles inside.
template <class Kernel>
void walk_bf16_cols(const MatmulJob& job, size_t n0, size_t n1, size_t block_rows) {
  const size_t K = job.K;
  const auto* w = static_cast<const uint16_t*>(job.w);
  for (size_t nb = n0; nb < n1; nb += block_rows) {
    const size_t ne = nb + block_rows < n1 ? nb + block_rows : n1;
    for (size_t m = 0; m < job.M; m += 4) {
      const int mr = int(job.M - m < 4 ? job.M - m : 4);
      for (size_t n = nb; n < ne; n += 4) {
        const int nr = int(ne - n < 4 ? ne - n : 4);
        // While the first x tile passes, the tile fetches the next weight tile ahead
        // (in address order): four rows read side by side are four short streams
        // that the hardware prefetcher barely follows. No effect on bits.
        const size_t next = n + 4;
        const uint16_t* pf = (m == 0 && next + 4 <= n1) ? w + next * K : nullptr;
        bf16_tile_any<Kernel>(mr, nr, Kernel::make(job, m, n, pf));
      }
    }
  }
}

}  // namespace
}  // namespace vc::cpu

// Matmul y = x · W^T for bf16 weights on the AMX path: x is rounded to bf16 once per
// call (as on the avx512bf16 path) and TDPBF16PS multiplies 16 x 32 weight tiles by
// 32 x 16 tiles of x^T into 16 x 16 f32 accumulator tiles, 8192 multiply-adds per
// instruction.
//
// How y[m, n] is computed -- the same for every element, whatever M, the tile the
// element lands in, or the thread count (batch invariance):
//   xb = bf16(x[m, :]) (nearest even; matmul_round_rows_bf16), zero-padded to a
//        multiple of 32
//   acc = 0 (one f32)
//   for k = 0, 32, 64, ...:  acc = tdpbf16ps(acc, w[n, k:k+32], xb[k:k+32])
//        the instruction's fixed order within the 16 pairs of the tile; products of
//        two bf16 are exact in f32; subnormal inputs count as 0; weights past K are 0
//   y[m, n] = acc (+ bias[n])
// An accumulator tile holds 16 weight rows by 16 x rows; x rows past M are zeros in
// the packed x^T and their results are dropped, weight rows past N are zeros in the
// packed weight tiles. Element (m, n) meets the same data in the same order in every
// tile, so rows do not depend on one another.
//
// Memory: a group of weight rows (4 tiles, 64 rows, for M <= 16; 2 tiles otherwise)
// is copied with ordinary loads, in address order, into tiles that stay in L2; then
// the x tiles pass over it (one x tile against 4 weight tiles: four independent
// accumulator chains; pairs of x tiles against 2 weight tiles: 2 x 2).
#include <immintrin.h>
#if !defined(__AMX_TILE__) || !defined(__AMX_BF16__)
#error "matmul_amx.cpp is compiled with -mamx-tile -mamx-bf16"
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {

constexpr size_t kRows = 16;            // weight rows per A tile, x rows per B tile
constexpr size_t kTileK = 32;           // bf16 per tile row (64 bytes)
constexpr size_t kTileBytes = 16 * 64;  // one tile
constexpr size_t kTileWords = kTileBytes / 4;
// Packed weight tiles lie 1 KiB + 64 bytes apart: a row's consecutive 64-byte pieces
// then fall in different L1 sets (1 KiB apart they would share 4 of 64 and the copy
// would evict its own lines; measured 2x slower).
constexpr size_t kPackedTileBytes = kTileBytes + 64;

/// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes (the kernels' roles: 0-3 accumulators, 4, 5, 7
// weight tiles, 6, 7 x^T tiles).
constexpr TileConfig make_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}

// A constant in memory: GCC 12 drops the colsb stores of a config built on the stack
// before LDTILECFG (seen: the instruction faulted on a zero-width tile).
alignas(64) constexpr TileConfig kTileConfig = make_tile_config();

void load_tile_config() { _tile_loadconfig(&kTileConfig); }

/// Copies weight rows [first, first + rows) into KT tiles kPackedTileBytes apart (row r
/// at byte r * 64 of each), zeros past K and past `rows`. Reads each row in address
/// order; the rows are consecutive in w.
void pack_weight_tiles(const uint16_t* w, size_t K, size_t first, size_t rows, size_t KT,
                       uint8_t* out) {
  const size_t full = K / kTileK;
  const __mmask32 tail = __mmask32((1u << (K % kTileK)) - 1u);
  for (size_t r = 0; r < kRows; ++r) {
    uint8_t* dst = out + r * 64;
    if (r >= rows) {
      for (size_t t = 0; t < KT; ++t) {
        _mm512_store_si512(dst + t * kPackedTileBytes, _mm512_setzero_si512());
      }
      continue;
    }
    const uint16_t* src = w + (first + r) * K;
    for (size_t t = 0; t < full; ++t) {
      _mm512_store_si512(dst + t * kPackedTileBytes, _mm512_loadu_si512(src + t * kTileK));
    }
    if (full < KT) {
      _mm512_store_si512(dst + full * kPackedTileBytes,
                         _mm512_maskz_loadu_epi16(tail, src + full * kTileK));
    }
  }
}

/// Two weight tiles by two x tiles (M > 16): accumulator tile i*2 + j = weight tile i
/// (packed, kPackedTileBytes apart per k-tile) times x tile j (kTileBytes apart), over
/// KT k-tiles, stored to c + (i*2 + j) * 256 (16 x 16 floats, rows: weight rows).
template <int NB, int MB>
void tile_2x2(const uint8_t* a, const uint8_t* b0, const uint8_t* b1, size_t KT, float* c) {
  _tile_zero(0);
  if constexpr (MB > 1) _tile_zero(1);
  if constexpr (NB > 1) _tile_zero(2);
  if constexpr (NB > 1 && MB > 1) _tile_zero(3);
  const uint8_t* a1 = a + KT * kPackedTileBytes;
  for (size_t t = 0; t < KT; ++t) {
    _tile_loadd(6, b0 + t * kTileBytes, 64);
    if constexpr (MB > 1) _tile_loadd(7, b1 + t * kTileBytes, 64);
    _tile_loadd(4, a + t * kPackedTileBytes, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (MB > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NB > 1) {
      _tile_loadd(5, a1 + t * kPackedTileBytes, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (MB > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64);
  if constexpr (MB > 1) _tile_stored(1, c + 256, 64);
  if constexpr (NB > 1) _tile_stored(2, c + 512, 64);
  if constexpr (NB > 1 && MB > 1) _tile_stored(3, c + 768, 64);
}

/// Up to four weight tiles by one x tile (M <= 16): four accumulator chains, so the
/// next k-tile's products do not wait on one tile's latency. Accumulator i = weight
/// tile i times the x tile, stored to c + i * 256.
/// Tiles: 0-3 accumulators, 6 x, 4, 5, 7 weights (4 again for the fourth).
template <int NB>
void tile_4x1(const uint8_t* a, const uint8_t* b, size_t KT, float* c) {
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  const size_t ld = KT * kPackedTileBytes;  // between the weight tiles' packed runs
  for (size_t t = 0; t < KT; ++t) {
    const uint8_t* at = a + t * kPackedTileBytes;
    _tile_loadd(6, b + t * kTileBytes, 64);
    _tile_loadd(4, at, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB > 1) {
      _tile_loadd(5, at + ld, 64);
      _tile_dpbf16ps(1, 5, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, at + 2 * ld, 64);
      _tile_dpbf16ps(2, 7, 6);
    }
    if constexpr (NB > 3) {
      _tile_loadd(4, at + 3 * ld, 64);
      _tile_dpbf16ps(3, 4, 6);
    }
  }
  _tile_stored(0, c, 64);
  if constexpr (NB > 1) _tile_stored(1, c + 256, 64);
  if constexpr (NB > 2) _tile_stored(2, c + 512, 64);
  if constexpr (NB > 3) _tile_stored(3, c + 768, 64);
}

/// y[m0 + c, first + r] = t[r][c] (+ bias) for the rows and columns that exist.
void scatter_tile(const float* t, const MatmulJob& job, size_t m0, size_t first, size_t rows) {
  const size_t cols = std::min(kRows, job.M - m0);
  for (size_t c = 0; c < cols; ++c) {
    float* yrow = job.y + (m0 + c) * job.N + first;
    for (size_t r = 0; r < rows; ++r) {
      yrow[r] = job.bias ? t[r * kRows + c] + job.bias[first + r] : t[r * kRows + c];
    }
  }
}

}  // namespace

size_t matmul_amx_pack_bytes(size_t M, size_t K) {
  const size_t KT = (K + kTileK - 1) / kTileK;
  return (M + kRows - 1) / kRows * KT * kTileBytes;
}

void matmul_pack_x_amx(const uint16_t* xb, size_t M, size_t ldxb, size_t K, uint8_t* out) {
  // Tile (mb, kt) holds x^T in pairs: row r, column c = the 32-bit pair
  // xb[mb*16 + c][kt*32 + 2r .. 2r+1] (zeros for rows past M); tiles of one mb are
  // consecutive.
  const size_t KT = (K + kTileK - 1) / kTileK, MB = (M + kRows - 1) / kRows;
  auto* words = reinterpret_cast<uint32_t*>(out);
  for (size_t mb = 0; mb < MB; ++mb) {
    for (size_t kt = 0; kt < KT; ++kt) {
      uint32_t* t = words + (mb * KT + kt) * kTileWords;
      for (size_t c = 0; c < kRows; ++c) {
        const size_t m = mb * kRows + c;
        if (m >= M) {
          for (size_t r = 0; r < kRows; ++r) t[r * kRows + c] = 0;
          continue;
        }
        uint32_t pairs[kRows];
        std::memcpy(pairs, xb + m * ldxb + kt * kTileK, sizeof(pairs));
        for (size_t r = 0; r < kRows; ++r) t[r * kRows + c] = pairs[r];
      }
    }
  }
}

void matmul_cols_amx(const MatmulJob& job, size_t n0, size_t n1) {
  const size_t K = job.K, M = job.M;
  const size_t KT = (K + kTileK - 1) / kTileK, MBs = (M + kRows - 1) / kRows;
  const auto* w = static_cast<const uint16_t*>(job.w);
  // Weight tiles per group: four against one x tile, two against pairs of x tiles.
  const size_t group = MBs == 1 ? 4 : 2;
  // Per thread, kept across calls: the packed weight tiles of one group.
  thread_local std::vector<uint8_t> packed;
  alignas(64) thread_local float acc[4 * 256];
  if (packed.size() < group * KT * kPackedTileBytes + 64) {
    packed.resize(group * KT * kPackedTileBytes + 64);
  }
  // 64-byte aligned start inside the buffer (the tiles are stored with aligned stores).
  auto* pk = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) &
                                        ~uintptr_t(63));

  load_tile_config();
  for (size_t nb = n0; nb < n1; nb += group * kRows) {
    const int NB = int(std::min(group, (n1 - nb + kRows - 1) / kRows));
    size_t rows[4] = {};
    for (int i = 0; i < NB; ++i) rows[i] = std::min(kRows, n1 - nb - size_t(i) * kRows);
    // The group's weight rows (one contiguous run of w) are copied in address order,
    // what the hardware prefetchers follow, into tiles that stay in L2. Tiles loaded
    // in place would touch 16 pages each (rows K * 2 bytes apart): with a model's
    // mmapped weights that measured 1.5-2.5x slower at M = 1 and 16 on this VM.
    for (int i = 0; i < NB; ++i) {
      pack_weight_tiles(w, K, nb + size_t(i) * kRows, rows[i], KT, pk + i * KT * kPackedTileBytes);
    }
    if (MBs == 1) {
      switch (NB) {
        case 4: tile_4x1<4>(pk, job.xpack, KT, acc); break;
        case 3: tile_4x1<3>(pk, job.xpack, KT, acc); break;
        case 2: tile_4x1<2>(pk, job.xpack, KT, acc); break;
        default: tile_4x1<1>(pk, job.xpack, KT, acc); break;
      }
      for (int i = 0; i < NB; ++i) scatter_tile(acc + i * 256, job, 0, nb + i * kRows, rows[i]);
      continue;
    }
    for (size_t mb = 0; mb < MBs; mb += 2) {
      const int MB = mb + 1 < MBs ? 2 : 1;
      const uint8_t* b0 = job.xpack + mb * KT * kTileBytes;
      const uint8_t* b1 = b0 + KT * kTileBytes;
      if (NB == 2 && MB == 2) tile_2x2<2, 2>(pk, b0, b1, KT, acc);
      else if (NB == 2) tile_2x2<2, 1>(pk, b0, b1, KT, acc);
      else if (MB == 2) tile_2x2<1, 2>(pk, b0, b1, KT, acc);
      else tile_2x2<1, 1>(pk, b0, b1, KT, acc);
      for (int i = 0; i < NB; ++i) {
        for (int j = 0; j < MB; ++j) {
          scatter_tile(acc + (i * 2 + j) * 256, job, (mb + j) * kRows, nb + i * kRows, rows[i]);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace vc::cpu

// Matmul y = x · W^T for bf16 weights on the AMX path: x is rounded to bf16 once per
// call (as on the avx512bf16 path) and TDPBF16PS multiplies 16 x 32 weight tiles by
// 32 x 16 tiles of x^T into 16 x 16 f32 accumulator tiles, 16384 multiply-adds per
// instruction, weights read as stored (no conversion, no repacking).
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
// the packed x^T and their results are dropped, weight rows past N come from a
// zero-padded copy. Element (m, n) meets the same data in the same order in every
// tile, so rows do not depend on one another.
#include <immintrin.h>
#if !defined(__AMX_TILE__) || !defined(__AMX_BF16__)
#error "matmul_amx.cpp is compiled with -mamx-tile -mamx-bf16"
#endif
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {

constexpr size_t kRows = 16;               // weight rows per A tile, x rows per B tile
constexpr size_t kTileK = 32;              // bf16 per tile row (64 bytes)
constexpr size_t kTileBytes = 16 * 64;     // one tile
constexpr size_t kTileWords = kTileBytes / 4;

/// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: accumulators C[i][j] (weight block i, x block j); 4, 5: weight blocks;
// 6, 7: x^T blocks. All 16 rows of 64 bytes.
void load_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  _tile_loadconfig(&c);
}

/// Where an A (weight) tile for k-tile kt comes from: the weight rows themselves, a
/// zero-padded copy of them, or (the last k-tile when K is not a multiple of 32) a
/// zero-padded copy of that tile alone.
struct WeightBlock {
  const uint16_t* rows;  // row 0, column 0
  size_t stride;         // bytes between rows
  const uint16_t* tail;  // the last k-tile, 64-byte rows, or nullptr
  size_t last_kt;

  const void* tile(size_t kt) const { return tail && kt == last_kt ? tail : rows + kt * kTileK; }
  size_t tile_stride(size_t kt) const { return tail && kt == last_kt ? 64 : stride; }
};

/// out: NB x MB accumulator tiles of 16 x 16 floats (rows: weight rows, columns: x rows).
template <int NB, int MB>
void tile_block(const WeightBlock* a, const uint8_t* b0, const uint8_t* b1, size_t KT,
                float* out) {
  _tile_zero(0);
  if constexpr (MB > 1) _tile_zero(1);
  if constexpr (NB > 1) _tile_zero(2);
  if constexpr (NB > 1 && MB > 1) _tile_zero(3);
  for (size_t kt = 0; kt < KT; ++kt) {
    _tile_loadd(6, b0 + kt * kTileBytes, 64);
    if constexpr (MB > 1) _tile_loadd(7, b1 + kt * kTileBytes, 64);
    _tile_loadd(4, a[0].tile(kt), a[0].tile_stride(kt));
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (MB > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NB > 1) {
      _tile_loadd(5, a[1].tile(kt), a[1].tile_stride(kt));
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (MB > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, 64);
  if constexpr (MB > 1) _tile_stored(1, out + 256, 64);
  if constexpr (NB > 1) _tile_stored(2, out + 512, 64);
  if constexpr (NB > 1 && MB > 1) _tile_stored(3, out + 768, 64);
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
  const size_t ldp = KT * kTileK;  // row stride of a zero-padded weight copy
  const bool k_tail = K % kTileK != 0;
  const auto* w = static_cast<const uint16_t*>(job.w);
  // Per thread, kept across calls: zero-padded weight copies (partial blocks and the
  // K tail) and the accumulator tiles on their way to y.
  thread_local std::vector<uint16_t> padded[2];
  alignas(64) thread_local uint16_t tails[2][kRows * kTileK];
  alignas(64) thread_local float acc[4 * 256];

  load_tile_config();
  for (size_t nb = n0; nb < n1; nb += 2 * kRows) {
    const size_t rows_left = n1 - nb;
    const int NB = rows_left > kRows ? 2 : 1;
    WeightBlock a[2];
    for (int i = 0; i < NB; ++i) {
      const size_t first = nb + size_t(i) * kRows;
      const size_t rows = std::min(kRows, n1 - first);
      WeightBlock& blk = a[i];
      blk.last_kt = KT - 1;
      blk.tail = nullptr;
      if (rows < kRows) {  // a partial block: all of it copied, zero-padded
        std::vector<uint16_t>& p = padded[i];
        p.assign(kRows * ldp, 0);
        for (size_t r = 0; r < rows; ++r) {
          std::memcpy(p.data() + r * ldp, w + (first + r) * K, K * sizeof(uint16_t));
        }
        blk.rows = p.data();
        blk.stride = ldp * sizeof(uint16_t);
      } else {
        blk.rows = w + first * K;
        blk.stride = K * sizeof(uint16_t);
        if (k_tail) {
          const size_t k0 = (KT - 1) * kTileK;
          std::memset(tails[i], 0, sizeof(tails[i]));
          for (size_t r = 0; r < kRows; ++r) {
            std::memcpy(tails[i] + r * kTileK, w + (first + r) * K + k0,
                        (K - k0) * sizeof(uint16_t));
          }
          blk.tail = tails[i];
        }
      }
    }
    for (size_t mb = 0; mb < MBs; mb += 2) {
      const int MB = mb + 1 < MBs ? 2 : 1;
      const uint8_t* b0 = job.xpack + mb * KT * kTileBytes;
      const uint8_t* b1 = b0 + KT * kTileBytes;
      if (NB == 2 && MB == 2) tile_block<2, 2>(a, b0, b1, KT, acc);
      else if (NB == 2) tile_block<2, 1>(a, b0, b1, KT, acc);
      else if (MB == 2) tile_block<1, 2>(a, b0, b1, KT, acc);
      else tile_block<1, 1>(a, b0, b1, KT, acc);
      // Scatter: tile (i, j) element [r][c] is y[(mb + j)*16 + c, nb + i*16 + r].
      for (int i = 0; i < NB; ++i) {
        const size_t first = nb + size_t(i) * kRows;
        const size_t rows = std::min(kRows, n1 - first);
        for (int j = 0; j < MB; ++j) {
          const float* t = acc + (i * 2 + j) * 256;
          const size_t m0 = (mb + size_t(j)) * kRows;
          const size_t cols = std::min(kRows, M - m0);
          for (size_t c = 0; c < cols; ++c) {
            float* yrow = job.y + (m0 + c) * job.N + first;
            for (size_t r = 0; r < rows; ++r) {
              yrow[r] = job.bias ? t[r * kRows + c] + job.bias[first + r] : t[r * kRows + c];
            }
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace vc::cpu

// Internal: the per-SIMD-path matmul entry points that kernels/cpu/matmul.cpp
// dispatches to. Each computes a range of output columns for all rows; see
// matmul_kernel.hpp for the arithmetic (which is what makes the result batch
// invariant).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cpu {

/// One matmul call: y[M, N] = x[M, K] · W[N, K]^T (+ bias).
struct MatmulJob {
  const float* x = nullptr;
  size_t M = 0, K = 0;
  const void* w = nullptr;
  DType wt = DType::f32;
  size_t N = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  // The AVX512_BF16 and AMX paths only: x rounded to bf16, rows of ldxb elements.
  const uint16_t* xb = nullptr;
  size_t ldxb = 0;
  // The AMX path only: xb transposed into AMX tiles (matmul_pack_x_amx).
  const uint8_t* xpack = nullptr;
  // The AVX-512 path with bf16 weights only: x split into pairs (matmul_split_pairs),
  // rows of ldxp floats.
  const float* xp = nullptr;
  size_t ldxp = 0;
};

/// Weights of a call this large or larger are taken to come from memory, not from a
/// cache: the kernels' tile prefetch then fills L2 (T1) instead of L1 (T0), where the
/// next tile and the current one together would fill it. Zen 4, one thread, decode:
/// the 1B shape (every matrix 2 MiB or more) 9.6 -> 11.9 tok/s with T1 (avx2 9.8 ->
/// 12.0); the bundled model (every matrix under 1 MiB, all of it in L3) 6067 -> 5021
/// tok/s with T1, so small matrices keep T0. Prefetches change no bits.
inline constexpr size_t kStreamedWeightBytes = size_t(2) << 20;
[[nodiscard]] inline bool matmul_weights_streamed(const MatmulJob& job) {
  return job.N * job.K * dtype_size(job.wt) >= kStreamedWeightBytes;
}

/// Fetches `bytes` (a multiple of 64) of weights at p ahead of their use: into L2 when
/// `to_l2` (matmul_weights_streamed), else into L1. No effect on bits.
inline void prefetch_weights(const char* p, size_t bytes, bool to_l2) {
  if (to_l2) {
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);  // T1
  } else {
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);  // T0
  }
}

/// Row stride (floats) of the packed f32 weight block: K rounded up to a cache line.
[[nodiscard]] constexpr size_t matmul_pack_ld(size_t K) { return (K + 15) / 16 * 16; }

/// Computes y[:, n_begin:n_end). When pack_rows > 0, blocks of pack_rows weight rows
/// are first converted to f32 in `pack` (pack_rows * matmul_pack_ld(K) floats) and
/// reused for every row of x; the conversion is exact, so the result is the same.
void matmul_cols_scalar(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                        size_t pack_rows);
void matmul_cols_avx2(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                      size_t pack_rows);
void matmul_cols_avx512(const MatmulJob& job, size_t n_begin, size_t n_end, float* pack,
                        size_t pack_rows);

/// The AVX-512 path's kernel for bf16 weights (matmul_pairs_avx512.cpp): f32 FMA over
/// the weights' 32-bit pairs. x rows are split per 32 elements into the 16 even ones,
/// then the 16 odd ones, matmul_pairs_ld(K) floats apart (K rounded up to 32,
/// zero-padded); matmul_split_pairs writes them. matmul_cols_avx512_pairs reads job.xp
/// and walks the columns in blocks of block_rows weight rows.
[[nodiscard]] size_t matmul_pairs_ld(size_t K);
void matmul_split_pairs(const float* x, size_t M, size_t K, float* out);
void matmul_cols_avx512_pairs(const MatmulJob& job, size_t n_begin, size_t n_end,
                              size_t block_rows);

/// The AVX512_BF16 path (bf16 weights only). x rows rounded to bf16 are matmul_bf16_ld(K)
/// elements apart (K rounded up to 32, then 32 more where that is a multiple of 512; zero-padded); matmul_round_rows_bf16 writes
/// them. matmul_cols_avx512bf16 reads job.xb and walks the columns in blocks of
/// block_rows weight rows.
[[nodiscard]] size_t matmul_bf16_ld(size_t K);
void matmul_round_rows_bf16(const float* x, size_t M, size_t K, uint16_t* out);
void matmul_cols_avx512bf16(const MatmulJob& job, size_t n_begin, size_t n_end,
                            size_t block_rows);

/// The AMX path (bf16 weights only). x rounded to bf16 (matmul_round_rows_bf16) is
/// transposed into tiles by matmul_pack_x_amx (matmul_amx_pack_bytes(M, K) bytes);
/// matmul_cols_amx reads job.xpack. The calling thread must have
/// AMX tile data permission (cpu_features.cpp asks for it when it checks the CPU).
[[nodiscard]] size_t matmul_amx_pack_bytes(size_t M, size_t K);
void matmul_pack_x_amx(const uint16_t* xb, size_t M, size_t ldxb, size_t K, uint8_t* out);
void matmul_cols_amx(const MatmulJob& job, size_t n_begin, size_t n_end);

}  // namespace vc::cpu

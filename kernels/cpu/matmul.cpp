// y[M, N] = x[M, K] · W[N, K]^T (+ bias): picks the SIMD path, decides whether to
// pack weight blocks to f32, and splits the output columns across the pool.
// The arithmetic itself is in matmul_kernel.hpp (one instance per path).
#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_paths.hpp"

namespace vc::cpu {
namespace {

using ColsFn = void (*)(const MatmulJob&, size_t, size_t, float*, size_t);

ColsFn cols_fn(SimdPath p) {
  switch (p) {
    case SimdPath::avx512bf16:  // f32 and f16 weights: the AVX-512 kernel
    case SimdPath::amx:
    case SimdPath::avx512:
      return matmul_cols_avx512;
    case SimdPath::avx2:
      return matmul_cols_avx2;
    case SimdPath::scalar:
      break;
  }
  return matmul_cols_scalar;
}

// Columns per thread part: a multiple of every path's register-tile width (2, 3, 4),
// so parts hold whole tiles. (Any split gives the same bits; this is for speed.)
constexpr size_t kColGrain = 16;

// Pack 16-bit weights to f32 once M is large enough that each weight vector would
// otherwise be converted again for every tile of x rows: the AVX2 and scalar paths.
// The AVX-512 path never packs: its conversion (widen, shift) is cheap next to the
// packed block's stores and reloads, and its direct kernel walks L2-sized blocks of
// weight rows; 2-core AMD EPYC, one thread, K 2048, 256 MiB of bf16 weights,
// 2026-12-04: M = 8 / 16 / 64 / 256 took 33 / 50 / 190 / 723 ms packed and
// 15 / 27 / 106 / 462 ms direct (bits equal: packing is exact). (bf16 weights on
// that path have since gone to the pairs kernel; f16 weights still take this one.)
constexpr size_t kPackMinRows = 8;

bool packs(SimdPath p) { return p == SimdPath::avx2 || p == SimdPath::scalar; }

// Below this many multiply-adds the thread hand-off costs more than it saves.
constexpr size_t kMinParallelMacs = size_t(1) << 16;

// Weight rows per packed block: about 192 KiB of f32, so the block stays in L2
// while all of x streams past it; a multiple of kColGrain.
size_t pack_rows_for(size_t K) {
  const size_t rows = (size_t(192) << 10) / (matmul_pack_ld(K) * sizeof(float));
  return std::clamp<size_t>(rows / kColGrain * kColGrain, kColGrain, 8 * kColGrain);
}

// bf16 weight rows per block of the pairs and AVX512_BF16 kernels: about 192 KiB, so the block
// stays in L2 while the x tiles pass over it; a multiple of kColGrain.
size_t bf16_block_rows_for(size_t K) {
  const size_t rows = (size_t(192) << 10) / (std::max<size_t>(K, 1) * sizeof(uint16_t));
  return std::clamp<size_t>(rows / kColGrain * kColGrain, kColGrain, 16 * kColGrain);
}

/// v's storage, grown to at least n elements: a calling thread's buffer kept across
/// calls (no allocation in steady state).
template <class E>
E* grown(std::vector<E>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The kernel a call runs on.
enum class Kernel {
  generic,  // matmul_kernel.hpp for the path's traits (packing or not)
  pairs,    // AVX-512, bf16 weights: f32 FMA over weight pairs (matmul_pairs_avx512.cpp)
  dpbf16,   // AVX512_BF16, bf16 weights: VDPBF16PS (matmul_avx512bf16.cpp)
  amx,      // AMX, bf16 weights: TDPBF16PS (matmul_amx.cpp)
};

struct Call {
  MatmulJob job;
  Kernel kernel = Kernel::generic;
  ColsFn fn = nullptr;     // Kernel::generic
  size_t pack_rows = 0;    // Kernel::generic: > 0 packs
  size_t block_rows = 0;   // Kernel::pairs and Kernel::dpbf16
};

void run_cols(const Call& c, size_t n0, size_t n1) {
  switch (c.kernel) {
    case Kernel::amx:
      return matmul_cols_amx(c.job, n0, n1);
    case Kernel::dpbf16:
      return matmul_cols_avx512bf16(c.job, n0, n1, c.block_rows);
    case Kernel::pairs:
      return matmul_cols_avx512_pairs(c.job, n0, n1, c.block_rows);
    case Kernel::generic:
      break;
  }
  if (c.pack_rows == 0) {
    c.fn(c.job, n0, n1, nullptr, 0);
    return;
  }
  // One buffer per thread, kept across calls (no allocation in steady state).
  thread_local std::vector<float> pack;
  c.fn(c.job, n0, n1, grown(pack, c.pack_rows * matmul_pack_ld(c.job.K)), c.pack_rows);
}

}  // namespace

void matmul(const float* x, size_t M, size_t K, const void* w, DType wt, size_t N,
            const float* bias, float* y, ThreadPool* pool) {
  if (M == 0 || N == 0) return;
  Call c;
  c.job = MatmulJob{x, M, K, w, wt, N, bias, y};
  const SimdPath path = active_simd_path();
  c.fn = cols_fn(path);
  c.pack_rows = (wt != DType::f32 && M >= kPackMinRows && packs(path)) ? pack_rows_for(K) : 0;
  const bool bf16_path = path == SimdPath::avx512bf16 || path == SimdPath::amx;
  if (bf16_path && wt == DType::bf16 && K > 0) {
    // x rounded to bf16 once, by the calling thread, in a buffer it keeps across calls;
    // the pool's threads only read it while this call runs.
    thread_local std::vector<uint16_t> xb;
    const size_t ld = matmul_bf16_ld(K);
    uint16_t* rounded = grown(xb, M * ld);
    matmul_round_rows_bf16(x, M, K, rounded);
    c.job.xb = rounded;
    c.job.ldxb = ld;
    if (path == SimdPath::amx) {
      // ... and transposed into AMX tiles, again once, by the calling thread.
      thread_local std::vector<uint8_t> xpack;
      uint8_t* tiles = grown(xpack, matmul_amx_pack_bytes(M, K));
      matmul_pack_x_amx(rounded, M, ld, K, tiles);
      c.job.xpack = tiles;
      c.kernel = Kernel::amx;
    } else {
      c.kernel = Kernel::dpbf16;
      c.block_rows = bf16_block_rows_for(K);
    }
  } else if (path == SimdPath::avx512 && wt == DType::bf16 && K > 0) {
    // x split into even and odd elements once, by the calling thread (as above).
    thread_local std::vector<float> xp;
    const size_t ld = matmul_pairs_ld(K);
    float* split = grown(xp, M * ld);
    matmul_split_pairs(x, M, K, split);
    c.job.xp = split;
    c.job.ldxp = ld;
    c.kernel = Kernel::pairs;
    c.block_rows = bf16_block_rows_for(K);
  }

  const bool parallel = pool != nullptr && pool->threads() > 1 && N > kColGrain &&
                        M * N * std::max<size_t>(K, 1) >= kMinParallelMacs;
  if (!parallel) {
    run_cols(c, 0, N);
    return;
  }
  const Call* cp = &c;  // one pointer: the std::function stays allocation-free
  pool->parallel_for(N, kColGrain, [cp](size_t n0, size_t n1) { run_cols(*cp, n0, n1); });
}

}  // namespace vc::cpu

// Paged attention for decode and verify rows (see attention.cuh), in two kernels:
//
// attention_chunk_kernel, one thread block per (row, KV head, chunk of positions):
//   the group of query heads sharing the KV head is done together, so each K and V
//   element is read from HBM once per chunk and row. Scores: one warp per position,
//   lanes over head_dim in pairs (4-byte bf16x2 loads; a warp reads 128 contiguous
//   bytes), each lane summing its dimensions in order, then a butterfly across
//   lanes. Max and sum of one head: one warp, lanes strided over positions, a
//   butterfly. Weighted V: one thread per (head, dim), positions in order. The
//   chunk's (max, sum, weighted V) go to the workspace.
// attention_merge_kernel, one thread block per (row, query head): the chunks in
//   position order, M' = max(M, m_j), a = exp(M - M'), b = exp(m_j - M'),
//   L' = fma(L, a, l_j * b), O' = fma(O, a, o_j * b), then out = O / L -- the CPU's
//   merge rule.
// Every order above depends on head_dim and a chunk's valid positions only.
#include <algorithm>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/exp_approx.cuh"
#include "kernels/cuda/smem_limit.cuh"
#include "kernels/cuda/warp_scores.cuh"

namespace vc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPosAhead = 4;  // positions whose K a warp loads before scoring them

struct ChunkArgs {
  const float* q;
  size_t n_heads;
  PagedKvRows kv;
  float scale;
  size_t chunk;     // positions per chunk
  size_t n_chunks;  // chunks of max_ctx (workspace stride)
  float* part_o;    // [M, n_heads, n_chunks, head_dim]
  float* part_ml;   // [M, n_heads, n_chunks, 2]
  size_t j0;        // the launch's first chunk (blockIdx.z counts from it)
};

// Two consecutive elements [i, i + 1] of a K or V row, as f32 (i even).
template <DType T>
__device__ __forceinline__ float2 load_pair(const void* base, size_t i) {
  if constexpr (T == DType::f32) {
    return __ldg(reinterpret_cast<const float2*>(static_cast<const float*>(base) + i));
  } else {
    const uint32_t w =
        __ldg(reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(base) + i));
    return make_float2(elem_to_f32<T>(uint16_t(w & 0xffffu)), elem_to_f32<T>(uint16_t(w >> 16)));
  }
}

}  // namespace

template <DType T>
static __global__ void __launch_bounds__(kThreads) attention_chunk_kernel(ChunkArgs a) {
  const size_t m = blockIdx.x, g = blockIdx.y, j = a.j0 + blockIdx.z;
  const PagedKvRows& kv = a.kv;
  const size_t n_ctx = size_t(kv.n_ctx[m]);
  const size_t start = j * a.chunk;
  if (start >= n_ctx) return;  // past this row's context: the merge never reads it
  const size_t c = n_ctx - start < a.chunk ? n_ctx - start : a.chunk;
  const size_t D = kv.head_dim, bt = kv.block_tokens;
  const size_t group = a.n_heads / kv.kv_heads;
  const size_t esz = T == DType::f32 ? 4 : 2;

  extern __shared__ float smem[];
  float* qs = smem;            // [group][D] scaled queries
  float* sc = qs + group * D;  // [group][chunk] scores, then probabilities
  int32_t* phys = reinterpret_cast<int32_t*>(sc + group * a.chunk);  // physical blocks
  const size_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;

  const float* qrow = a.q + (m * a.n_heads + g * group) * D;
  for (size_t i = threadIdx.x; i < group * D; i += kThreads) qs[i] = __fmul_rn(qrow[i], a.scale);
  const size_t first_block = start / bt, blocks = (c + bt - 1) / bt;
  for (size_t b = threadIdx.x; b < blocks; b += kThreads)
    phys[b] = kv.block_tables[m * kv.table_stride + first_block + b];
  __syncthreads();

  // Byte offset of position t (of this chunk) of KV head g.
  auto row_of = [&](const void* base, size_t t) {
    const size_t b = t / bt, within = t % bt;
    const size_t off = ((size_t(phys[b]) * kv.kv_heads + g) * bt + within) * D * esz;
    return static_cast<const char*>(base) + off;
  };

  // Scores: one warp per position, kPosAhead positions' K loaded before their FMAs
  // (enough reads in flight to stream K at HBM speed); K loaded once for all heads
  // of the group. Each score is its own dot product: the grouping changes no bits.
  const int steps = int((D + 63) / 64);
  for (size_t t0 = warp; t0 < c; t0 += size_t(kWarps) * kPosAhead) {
    float2 kp[kPosAhead][kMaxPairSteps];
#pragma unroll
    for (int p = 0; p < kPosAhead; ++p) {
      const size_t t = t0 + size_t(p) * kWarps;
      const char* kr = t < c ? row_of(kv.k, t) : nullptr;
#pragma unroll
      for (int s = 0; s < kMaxPairSteps; ++s) {
        const size_t d = size_t(s) * 64 + 2 * lane;
        kp[p][s] =
            kr != nullptr && s < steps && d < D ? load_pair<T>(kr, d) : make_float2(0.f, 0.f);
      }
    }
#pragma unroll
    for (int p = 0; p < kPosAhead; ++p) {
      const size_t t = t0 + size_t(p) * kWarps;
      if (t >= c) break;
      warp_scores(kp[p], qs, group, D, steps, lane, sc + t, a.chunk);
    }
  }
  __syncthreads();

  // Per head: chunk max, probabilities, their sum.
  for (size_t h = warp; h < group; h += kWarps) {
    float* s = sc + h * a.chunk;
    float mx = -__int_as_float(0x7f800000);
    for (size_t t = lane; t < c; t += 32) mx = fmaxf(mx, s[t]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
    float sum = 0.f;
    for (size_t t = lane; t < c; t += 32) {
      const float p = exp_approx(__fsub_rn(s[t], mx));
      s[t] = p;
      sum = __fadd_rn(sum, p);
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
    if (lane == 0) {
      float* ml = a.part_ml + ((m * a.n_heads + g * group + h) * a.n_chunks + j) * 2;
      ml[0] = mx;
      ml[1] = sum;
    }
  }
  __syncthreads();

  // Weighted V: one thread per (head, dim), positions in order, a block at a time
  // (neighbouring threads read neighbouring elements of a V row).
  for (size_t i = threadIdx.x; i < group * D; i += kThreads) {
    const size_t h = i / D, d = i % D;
    const float* p = sc + h * a.chunk;
    float o = 0.f;
    for (size_t b = 0, t = 0; b < blocks; ++b) {
      const size_t off = ((size_t(phys[b]) * kv.kv_heads + g) * bt) * D + d;  // elements
      const size_t end = t + bt < c ? t + bt : c;
#pragma unroll 8
      for (size_t within = 0; t < end; ++t, ++within)
        o = fmaf(p[t], load_f32<T>(kv.v, off + within * D), o);
    }
    a.part_o[((m * a.n_heads + g * group + h) * a.n_chunks + j) * D + d] = o;
  }
}

static __global__ void attention_merge_kernel(const int32_t* __restrict__ n_ctx_rows,
                                              size_t n_heads, size_t D, size_t chunk,
                                              size_t n_chunks, const float* __restrict__ part_o,
                                              const float* __restrict__ part_ml,
                                              float* __restrict__ out) {
  const size_t m = blockIdx.x, h = blockIdx.y;
  const size_t n_ctx = size_t(n_ctx_rows[m]);
  // Rows past max_ctx (a caller's error) read no chunk that was never written.
  const size_t want = (n_ctx + chunk - 1) / chunk;
  const size_t chunks = want < n_chunks ? want : n_chunks;
  const size_t base = (m * n_heads + h) * n_chunks;
  float* o_out = out + (m * n_heads + h) * D;
  for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
    float M = -__int_as_float(0x7f800000), L = 0.f, O = 0.f;
    for (size_t j = 0; j < chunks; ++j) {
      const float mj = part_ml[(base + j) * 2], lj = part_ml[(base + j) * 2 + 1];
      const float mn = fmaxf(M, mj);
      const float fa = exp_approx(__fsub_rn(M, mn)), fb = exp_approx(__fsub_rn(mj, mn));
      L = fmaf(L, fa, __fmul_rn(lj, fb));
      O = fmaf(O, fa, __fmul_rn(part_o[(base + j) * D + d], fb));
      M = mn;
    }
    o_out[d] = chunks == 0 ? 0.f : __fdiv_rn(O, L);
  }
}

namespace {

template <DType T>
cudaError_t launch_chunks(const ChunkArgs& a, size_t M, size_t count, size_t smem, cudaStream_t stream) {
  const cudaError_t e =
      raise_dynamic_smem_limit(reinterpret_cast<const void*>(attention_chunk_kernel<T>), smem);
  if (e != cudaSuccess) return e;
  const dim3 grid{unsigned(M), unsigned(a.kv.kv_heads), unsigned(count)};
  attention_chunk_kernel<T><<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_rows(const float* q, size_t M, size_t n_heads, const PagedKvRows& kv,
                                  float scale, float* out, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream) {
  const size_t chunk = attention_chunk_positions(kv.block_tokens == 0 ? 1 : kv.block_tokens);
  const size_t n_chunks = std::max<size_t>(1, (kv.max_ctx + chunk - 1) / chunk);
  const cudaError_t e = launch_attention_chunks(q, M, n_heads, kv, scale, workspace, workspace_floats,
                                                0, n_chunks, stream);
  if (e != cudaSuccess) return e;
  return launch_attention_merge(M, n_heads, kv, out, workspace, workspace_floats, stream);
}

cudaError_t launch_attention_chunks(const float* q, size_t M, size_t n_heads, const PagedKvRows& kv,
                                    float scale, float* workspace, size_t workspace_floats,
                                    size_t j0, size_t j1, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  const size_t D = kv.head_dim, bt = kv.block_tokens;
  if (kv.kv_heads == 0 || n_heads == 0 || n_heads % kv.kv_heads != 0 || bt == 0 || D == 0 ||
      D % 2 != 0 || D > kAttentionMaxHeadDim)
    return cudaErrorInvalidValue;
  const size_t chunk = attention_chunk_positions(bt);
  const size_t n_chunks = std::max<size_t>(1, (kv.max_ctx + chunk - 1) / chunk);
  if (workspace_floats < attention_workspace_floats(M, n_heads, D, bt, kv.max_ctx))
    return cudaErrorInvalidValue;
  if (M > 0x7fffffffu || kv.kv_heads > 65535 || n_chunks > 65535 || n_heads > 65535)
    return cudaErrorInvalidValue;  // grid limits
  const size_t group = n_heads / kv.kv_heads;
  const size_t smem = (group * D + group * chunk) * sizeof(float) + (chunk / bt) * sizeof(int32_t);
  if (smem > 227 * 1024) return cudaErrorInvalidValue;  // Hopper's per-block maximum

  if (j1 > n_chunks) j1 = n_chunks;
  if (kv.max_ctx == 0 || j0 >= j1) return cudaSuccess;
  float* part_o = workspace;
  float* part_ml = workspace + M * n_heads * n_chunks * D;
  const ChunkArgs a{q, n_heads, kv, scale, chunk, n_chunks, part_o, part_ml, j0};
  switch (kv.dtype) {
    case DType::f32:
      return launch_chunks<DType::f32>(a, M, j1 - j0, smem, stream);
    case DType::f16:
      return launch_chunks<DType::f16>(a, M, j1 - j0, smem, stream);
    case DType::bf16:
      return launch_chunks<DType::bf16>(a, M, j1 - j0, smem, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_attention_merge(size_t M, size_t n_heads, const PagedKvRows& kv, float* out,
                                   const float* workspace, size_t workspace_floats,
                                   cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  const size_t D = kv.head_dim, bt = kv.block_tokens;
  if (n_heads == 0 || bt == 0 || D == 0 || M > 0x7fffffffu || n_heads > 65535)
    return cudaErrorInvalidValue;
  const size_t chunk = attention_chunk_positions(bt);
  const size_t n_chunks = std::max<size_t>(1, (kv.max_ctx + chunk - 1) / chunk);
  if (workspace_floats < attention_workspace_floats(M, n_heads, D, bt, kv.max_ctx))
    return cudaErrorInvalidValue;
  const float* part_o = workspace;
  const float* part_ml = workspace + M * n_heads * n_chunks * D;
  const dim3 grid{unsigned(M), unsigned(n_heads)};
  const unsigned threads = D >= 128 ? 128u : unsigned((D + 31) / 32 * 32);
  // With no chunk written (max_ctx 0), rows merge none: zeros, whatever their n_ctx.
  attention_merge_kernel<<<grid, threads, 0, stream>>>(kv.n_ctx, n_heads, D, chunk,
                                                       kv.max_ctx > 0 ? n_chunks : 0, part_o,
                                                       part_ml, out);
  return cudaGetLastError();
}

}  // namespace vc::cuda

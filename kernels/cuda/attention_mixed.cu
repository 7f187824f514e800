// The drafter's attention (see attention_mixed.cuh), in the two steps of
// attention.cu: one thread block per (row, KV head, chunk of kChunk entries) scores
// its entries (one warp per entry, lanes over head_dim pairs), takes the chunk's max,
// probabilities and sum, and its weighted V (one thread per (head, dim), entries in
// order); one block per (row, query head) merges the chunks in order. An entry is a
// prefix row (entry < count) or a tail position (tail_begin + entry - count).
// Quantized prefixes (prefix_quant_k/v) go through attention_mixed_quant_chunk_kernel:
// the same steps, with the chunk's prefix rows dequantized kSub at a time into
// shared memory (one warp per row: codes, bf16 rows, outliers, then RoPE or the
// Hadamard transform, the CPU decode's order and roundings) before they are read.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_mixed.cuh"
#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/exp_approx.cuh"
#include "kernels/cuda/smem_limit.cuh"
#include "kernels/cuda/warp_scores.cuh"

namespace vc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr size_t kChunk = 256;  // entries per chunk

struct MixedArgs {
  const float* q;
  size_t n_heads;
  MixedKvRows kv;
  float scale;
  size_t n_chunks;
  float* part_o;   // [M, n_heads, n_chunks, head_dim]
  float* part_ml;  // [M, n_heads, n_chunks, 2]
};

// Entries of (row m, KV head g).
__device__ __forceinline__ size_t entries_of(const MixedKvRows& kv, size_t m, size_t g) {
  const size_t count = size_t(kv.prefix_count[m * kv.kv_heads + g]);
  const size_t n_ctx = size_t(kv.n_ctx[m]), begin = size_t(kv.tail_begin[m]);
  return count + (n_ctx > begin ? n_ctx - begin : 0);
}

template <DType T>
__device__ __forceinline__ float2 load_pair(const char* row, size_t i) {
  if constexpr (T == DType::f32) {
    return __ldg(reinterpret_cast<const float2*>(row) + i / 2);
  } else {
    const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(row) + i / 2);
    return make_float2(elem_to_f32<T>(uint16_t(w & 0xffffu)), elem_to_f32<T>(uint16_t(w >> 16)));
  }
}

// Each head's chunk maximum, probabilities (over its c scores, in place) and their
// sum, one warp per head; the maximum and sum go to a.part_ml.
__device__ __forceinline__ void chunk_softmax(const MixedArgs& a, float* sc, size_t c,
                                              size_t group, size_t m, size_t g, size_t j,
                                              size_t warp, size_t lane) {
  for (size_t h = warp; h < group; h += kWarps) {
    float* s = sc + h * kChunk;
    float mx = -__int_as_float(0x7f800000);
    for (size_t t = lane; t < c; t += 32) mx = fmaxf(mx, s[t]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
    float sum = 0.f;
    for (size_t t = lane; t < c; t += 32) {
      const float p = exp_approx(s[t] - mx);
      s[t] = p;
      sum += p;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
    if (lane == 0) {
      float* ml = a.part_ml + ((m * a.n_heads + g * group + h) * a.n_chunks + j) * 2;
      ml[0] = mx;
      ml[1] = sum;
    }
  }
}

constexpr size_t kSub = 32;  // quantized prefix rows staged in shared memory at once

// Code i (of `bits` bits, LSB first) of a packed buffer of `bytes` bytes.
__device__ __forceinline__ uint32_t code_at(const uint8_t* codes, size_t bytes, size_t i, int bits) {
  const size_t bit = i * size_t(bits), b = bit / 8;
  uint32_t w = 0;
  for (size_t k = 0; k < 3 && b + k < bytes; ++k) w |= uint32_t(__ldg(codes + b + k)) << (8 * k);
  return (w >> (bit % 8)) & ((1u << bits) - 1u);
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// Row r of a quantized side into dst[0, D), by the 32 lanes of one warp: the values
// vc::PackedSide::decode_rows writes, bit for bit.
__device__ void dequant_row(const QuantPrefixSide& s, size_t r, size_t D, float* dst, size_t lane) {
  if (r < s.rows) {
    const size_t bc = s.block_cols, col_blocks = (D + bc - 1) / bc;
    const size_t b0 = (r / s.block_rows) * col_blocks;
    for (size_t d = lane; d < D; d += 32) {
      const size_t b = b0 + d / bc;
      const float code = float(code_at(s.codes, s.codes_bytes, r * D + d, s.bits));
      dst[d] = __fadd_rn(f16_bits_to_f32(__ldg(s.zero + b)),
                         __fmul_rn(code, f16_bits_to_f32(__ldg(s.scale + b))));
    }
  } else {
    for (size_t d = lane; d < D; d += 32) dst[d] = bf16_bits_to_f32(__ldg(s.full + (r - s.rows) * D + d));
  }
  __syncwarp();
  if (s.n_outliers > 0) {  // the row's outliers: [lower_bound(r * D), lower_bound((r + 1) * D))
    size_t lo = 0, hi = s.n_outliers;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (size_t(__ldg(s.outliers + mid)) < r * D) lo = mid + 1; else hi = mid;
    }
    for (size_t k = lo + lane; k < s.n_outliers; k += 32) {
      const size_t at = size_t(__ldg(s.outliers + k));
      if (at >= (r + 1) * D) break;
      dst[at - r * D] = bf16_bits_to_f32(__ldg(s.outlier_values + k));
    }
    __syncwarp();
  }
  if (s.rope_table != nullptr) {  // rotate-half RoPE, cpu::rope_row's arithmetic
    const size_t h = D / 2;
    const float* cs = s.rope_table + size_t(__ldg(s.positions + r)) * D;
    for (size_t i = lane; i < h; i += 32) {
      const float c = __ldg(cs + i), sn = __ldg(cs + h + i), x1 = dst[i], x2 = dst[i + h];
      dst[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn));
      dst[i + h] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn));
    }
    __syncwarp();
  } else if (s.hadamard) {  // butterflies stage by stage, then 1 / sqrt(D)
    for (size_t hs = 1; hs < D; hs *= 2) {
      for (size_t j = lane; j < D / 2; j += 32) {
        const size_t i0 = (j / hs) * 2 * hs + j % hs;
        const float x = dst[i0], y = dst[i0 + hs];
        dst[i0] = __fadd_rn(x, y);
        dst[i0 + hs] = __fsub_rn(x, y);
      }
      __syncwarp();
    }
    const float norm = float(1.0 / sqrt(double(D)));
    for (size_t d = lane; d < D; d += 32) dst[d] = __fmul_rn(dst[d], norm);
    __syncwarp();
  }
}

}  // namespace

/// attention_mixed_chunk_kernel for launches with quantized prefixes: the chunk's
/// prefix rows (quantized or not) are staged kSub at a time in shared memory, K for
/// the scores, then V for the weighted sum (kept per (head, dim) in shared memory
/// across the sub-chunks, accumulated in entry order as the plain kernel does).
template <DType T>
static __global__ void __launch_bounds__(kThreads) attention_mixed_quant_chunk_kernel(MixedArgs a) {
  const size_t m = blockIdx.x, g = blockIdx.y, j = blockIdx.z;
  const MixedKvRows& kv = a.kv;
  const size_t n = entries_of(kv, m, g), start = j * kChunk;
  if (start >= n) return;
  const size_t c = n - start < kChunk ? n - start : kChunk;
  const size_t D = kv.head_dim, bt = kv.block_tokens, group = a.n_heads / kv.kv_heads;
  const size_t esz = T == DType::f32 ? 4 : 2;
  const size_t head = m * kv.kv_heads + g;
  const size_t count = size_t(kv.prefix_count[head]);
  const size_t tail_begin = size_t(kv.tail_begin[m]);
  const QuantPrefixSide& quant_k = kv.prefix_quant_k[head];
  const QuantPrefixSide& quant_v = kv.prefix_quant_v[head];
  const bool quantized = quant_k.codes != nullptr;

  extern __shared__ float smem[];
  float* qs = smem;                 // [group][D] scaled queries
  float* sc = qs + group * D;       // [group][kChunk]
  float* rows = sc + group * kChunk;  // [kSub][D] staged prefix rows of one side
  float* o = rows + kSub * D;       // [group][D] weighted V so far
  const size_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  const float* qrow = a.q + (m * a.n_heads + g * group) * D;
  for (size_t i = threadIdx.x; i < group * D; i += kThreads) {
    qs[i] = __fmul_rn(qrow[i], a.scale);
    o[i] = 0.f;
  }

  // Stages the prefix rows among entries [sub, sub + cs) of the chunk (side K or V).
  auto stage = [&](size_t sub, size_t cs, bool is_v) {
    __syncthreads();  // the previous reads of `rows` are done
    for (size_t t = warp; t < cs; t += kWarps) {
      const size_t e = start + sub + t;
      if (e >= count) break;
      float* dst = rows + t * D;
      if (quantized) {
        dequant_row(is_v ? quant_v : quant_k, e, D, dst, lane);
      } else {
        const char* src = static_cast<const char*>(is_v ? kv.prefix_v[head] : kv.prefix_k[head]) + e * D * esz;
        for (size_t d = lane; d < D; d += 32)
          dst[d] = elem_to_f32<T>(reinterpret_cast<const typename Elem<T>::type*>(src)[d]);
      }
    }
    __syncthreads();
  };
  // Row of tail entry e (of this chunk) in K (is_v false) or V.
  auto tail_row = [&](size_t e, bool is_v) -> const char* {
    const size_t pos = tail_begin + (start + e - count);
    const size_t block = size_t(kv.block_tables[m * kv.table_stride + pos / bt]);
    const size_t off = ((block * kv.kv_heads + g) * bt + pos % bt) * D * esz;
    return static_cast<const char*>(is_v ? kv.v : kv.k) + off;
  };

  // Scores (scale * q) · k, as the plain kernel computes them.
  const int steps = int((D + 63) / 64);
  for (size_t sub = 0; sub < c; sub += kSub) {
    const size_t cs = c - sub < kSub ? c - sub : kSub;
    stage(sub, cs, false);
    for (size_t t = warp; t < cs; t += kWarps) {
      const size_t e = sub + t;
      const bool in_prefix = start + e < count;
      const char* kr = in_prefix ? nullptr : tail_row(e, false);
      float2 kp[kMaxPairSteps];
#pragma unroll
      for (int s = 0; s < kMaxPairSteps; ++s) {
        const size_t d = size_t(s) * 64 + 2 * lane;
        if (s < steps && d < D)
          kp[s] = in_prefix ? make_float2(rows[t * D + d], rows[t * D + d + 1]) : load_pair<T>(kr, d);
        else
          kp[s] = make_float2(0.f, 0.f);
      }
      warp_scores(kp, qs, group, D, steps, lane, sc + e, kChunk);
    }
  }
  __syncthreads();

  chunk_softmax(a, sc, c, group, m, g, j, warp, lane);

  for (size_t sub = 0; sub < c; sub += kSub) {
    const size_t cs = c - sub < kSub ? c - sub : kSub;
    stage(sub, cs, true);
    for (size_t i = threadIdx.x; i < group * D; i += kThreads) {
      const size_t h = i / D, d = i % D;
      const float* p = sc + h * kChunk + sub;
      float acc = o[i];
      for (size_t t = 0; t < cs; ++t) {
        const float v = start + sub + t < count
                            ? rows[t * D + d]
                            : elem_to_f32<T>(reinterpret_cast<const typename Elem<T>::type*>(
                                  tail_row(sub + t, true))[d]);
        acc = fmaf(p[t], v, acc);
      }
      o[i] = acc;
    }
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < group * D; i += kThreads) {
    const size_t h = i / D, d = i % D;
    a.part_o[((m * a.n_heads + g * group + h) * a.n_chunks + j) * D + d] = o[i];
  }
}

template <DType T>
static __global__ void __launch_bounds__(kThreads) attention_mixed_chunk_kernel(MixedArgs a) {
  const size_t m = blockIdx.x, g = blockIdx.y, j = blockIdx.z;
  const MixedKvRows& kv = a.kv;
  const size_t n = entries_of(kv, m, g), start = j * kChunk;
  if (start >= n) return;
  const size_t c = n - start < kChunk ? n - start : kChunk;
  const size_t D = kv.head_dim, bt = kv.block_tokens, group = a.n_heads / kv.kv_heads;
  const size_t esz = T == DType::f32 ? 4 : 2;
  const size_t count = size_t(kv.prefix_count[m * kv.kv_heads + g]);
  const size_t tail_begin = size_t(kv.tail_begin[m]);

  extern __shared__ float smem[];
  float* qs = smem;            // [group][D] scaled queries
  float* sc = qs + group * D;  // [group][kChunk]
  const size_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  const float* qrow = a.q + (m * a.n_heads + g * group) * D;
  for (size_t i = threadIdx.x; i < group * D; i += kThreads) qs[i] = __fmul_rn(qrow[i], a.scale);
  __syncthreads();

  // Row of entry e (of this chunk) in K (is_v false) or V.
  auto row_of = [&](size_t e, bool is_v) -> const char* {
    e += start;
    if (e < count) {
      const void* base = is_v ? kv.prefix_v[m * kv.kv_heads + g] : kv.prefix_k[m * kv.kv_heads + g];
      return static_cast<const char*>(base) + e * D * esz;
    }
    const size_t pos = tail_begin + (e - count);
    const size_t block = size_t(kv.block_tables[m * kv.table_stride + pos / bt]);
    const size_t off = ((block * kv.kv_heads + g) * bt + pos % bt) * D * esz;
    return static_cast<const char*>(is_v ? kv.v : kv.k) + off;
  };

  // Scores (scale * q) · k, as the CPU's attention kernels compute them.
  const int steps = int((D + 63) / 64);
  for (size_t t = warp; t < c; t += kWarps) {
    const char* kr = row_of(t, false);
    float2 kp[kMaxPairSteps];
#pragma unroll
    for (int s = 0; s < kMaxPairSteps; ++s) {
      const size_t d = size_t(s) * 64 + 2 * lane;
      kp[s] = s < steps && d < D ? load_pair<T>(kr, d) : make_float2(0.f, 0.f);
    }
    warp_scores(kp, qs, group, D, steps, lane, sc + t, kChunk);
  }
  __syncthreads();

  chunk_softmax(a, sc, c, group, m, g, j, warp, lane);
  __syncthreads();

  for (size_t i = threadIdx.x; i < group * D; i += kThreads) {
    const size_t h = i / D, d = i % D;
    const float* p = sc + h * kChunk;
    float o = 0.f;
    for (size_t t = 0; t < c; ++t)
      o = fmaf(p[t],
               elem_to_f32<T>(reinterpret_cast<const typename Elem<T>::type*>(row_of(t, true))[d]),
               o);
    a.part_o[((m * a.n_heads + g * group + h) * a.n_chunks + j) * D + d] = o;
  }
}

static __global__ void attention_mixed_merge_kernel(MixedKvRows kv, size_t n_heads, size_t n_chunks,
                                                    const float* part_o, const float* part_ml,
                                                    float* out) {
  const size_t m = blockIdx.x, h = blockIdx.y, D = kv.head_dim;
  const size_t g = h / (n_heads / kv.kv_heads);
  const size_t want = (entries_of(kv, m, g) + kChunk - 1) / kChunk;
  const size_t chunks = want < n_chunks ? want : n_chunks;
  const size_t base = (m * n_heads + h) * n_chunks;
  for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
    float M = -__int_as_float(0x7f800000), L = 0.f, O = 0.f;
    for (size_t j = 0; j < chunks; ++j) {
      const float mj = part_ml[(base + j) * 2], lj = part_ml[(base + j) * 2 + 1];
      const float mn = fmaxf(M, mj);
      const float fa = exp_approx(M - mn), fb = exp_approx(mj - mn);
      L = fmaf(L, fa, lj * fb);
      O = fmaf(O, fa, part_o[(base + j) * D + d] * fb);
      M = mn;
    }
    out[(m * n_heads + h) * D + d] = chunks == 0 ? 0.f : O / L;
  }
}

size_t attention_mixed_workspace_floats(size_t M, size_t n_heads, size_t head_dim,
                                        size_t max_entries) {
  return M * n_heads * ((max_entries + kChunk - 1) / kChunk) * (head_dim + 2);
}

cudaError_t launch_attention_rows_mixed(const float* q, size_t M, size_t n_heads,
                                        const MixedKvRows& kv, float scale, float* out,
                                        float* workspace, size_t workspace_floats,
                                        cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  const size_t D = kv.head_dim;
  if (kv.kv_heads == 0 || n_heads == 0 || n_heads % kv.kv_heads != 0 || kv.block_tokens == 0 ||
      D == 0 || D % 2 != 0 || D > kAttentionMaxHeadDim)
    return cudaErrorInvalidValue;
  const size_t n_chunks = std::max<size_t>(1, (kv.max_entries + kChunk - 1) / kChunk);
  if (workspace_floats < attention_mixed_workspace_floats(M, n_heads, D, kv.max_entries))
    return cudaErrorInvalidValue;
  if (M > 0x7fffffffu || kv.kv_heads > 65535 || n_chunks > 65535 || n_heads > 65535)
    return cudaErrorInvalidValue;
  const size_t group = n_heads / kv.kv_heads;
  const bool quant = kv.prefix_quant_k != nullptr;
  if (quant && kv.prefix_quant_v == nullptr) return cudaErrorInvalidValue;
  const size_t smem = (group * D + group * kChunk + (quant ? kSub * D + group * D : 0)) * sizeof(float);
  if (smem > 227 * 1024) return cudaErrorInvalidValue;
  float* part_o = workspace;
  float* part_ml = workspace + M * n_heads * n_chunks * D;
  if (kv.max_entries > 0) {
    const MixedArgs a{q, n_heads, kv, scale, n_chunks, part_o, part_ml};
    const dim3 grid{unsigned(M), unsigned(kv.kv_heads), unsigned(n_chunks)};
    auto launch = [&](auto kernel) {
      const cudaError_t e = raise_dynamic_smem_limit(reinterpret_cast<const void*>(kernel), smem);
      if (e != cudaSuccess) return e;
      kernel<<<grid, kThreads, smem, stream>>>(a);
      return cudaGetLastError();
    };
    cudaError_t e = cudaErrorInvalidValue;
    switch (kv.dtype) {
      case DType::f32:
        e = quant ? launch(attention_mixed_quant_chunk_kernel<DType::f32>)
                  : launch(attention_mixed_chunk_kernel<DType::f32>);
        break;
      case DType::f16:
        e = quant ? launch(attention_mixed_quant_chunk_kernel<DType::f16>)
                  : launch(attention_mixed_chunk_kernel<DType::f16>);
        break;
      case DType::bf16:
        e = quant ? launch(attention_mixed_quant_chunk_kernel<DType::bf16>)
                  : launch(attention_mixed_chunk_kernel<DType::bf16>);
        break;
    }
    if (e != cudaSuccess) return e;
  }
  const dim3 grid{unsigned(M), unsigned(n_heads)};
  const unsigned threads = D >= 128 ? 128u : unsigned((D + 31) / 32 * 32);
  // With no chunk written (max_entries 0), rows merge none: zeros.
  attention_mixed_merge_kernel<<<grid, threads, 0, stream>>>(kv, n_heads,
                                                             kv.max_entries > 0 ? n_chunks : 0,
                                                             part_o, part_ml, out);
  return cudaGetLastError();
}

}  // namespace vc::cuda

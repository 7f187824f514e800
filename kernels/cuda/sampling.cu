// Greedy / Gumbel-max sampling and the chosen token's log-probability (see
// sampling.cuh): one thread block per row; each thread scans a strided slice of the
// vocabulary keeping its best (score, id), the block reduces pairs in shared memory
// (a fixed tree; ties go to the lower id, so the result is the sequential argmax),
// then a second pass sums exp(logit - max) in double for the log-probability.
#include <cmath>

#include "kernels/cuda/sampling.cuh"

namespace vc::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// runtime/sampler.cpp gumbel_uniform: strictly inside (0, 1).
__device__ __forceinline__ double gumbel_uniform(uint64_t seed, int64_t position, int32_t token) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ uint64_t(position));
  h = splitmix64(h ^ uint64_t(uint32_t(token)));
  return (double(h >> 11) + 0.5) * 0x1.0p-53;
}

// (a_score, a_id) beats (b_score, b_id): higher score, or equal and lower id; a
// NaN score or id < 0 never wins.
__device__ __forceinline__ bool beats(double as, int32_t ai, double bs, int32_t bi) {
  if (ai < 0 || as != as) return false;
  if (bi < 0 || bs != bs) return true;
  return as > bs || (as == bs && ai < bi);
}

}  // namespace

static __global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ logits, size_t vocab,
                       const float* __restrict__ temperature, const uint64_t* __restrict__ seed,
                       const int64_t* __restrict__ position, int32_t* __restrict__ tokens,
                       float* __restrict__ logprobs) {
  __shared__ double s_score[kThreads];
  __shared__ int32_t s_id[kThreads];
  __shared__ double s_sum[kThreads];
  const size_t m = blockIdx.x;
  const float* row = logits + m * vocab;
  const float t = temperature[m];
  const bool greedy = !(t > 0.f);
  const double inv_t = greedy ? 1.0 : 1.0 / double(t);
  const uint64_t sd = seed[m];
  const int64_t pos = position[m];

  double best = 0.0, mx = -INFINITY;
  int32_t best_id = -1;
  for (size_t i = threadIdx.x; i < vocab; i += kThreads) {
    const double v = double(row[i]);
    mx = fmax(mx, v);
    // Rounded product, then the difference (no FMA): the CPU's expression.
    const double score =
        greedy ? v : __dsub_rn(__dmul_rn(v, inv_t), log(-log(gumbel_uniform(sd, pos, int32_t(i)))));
    // A sampled score of -inf never wins (the CPU's strict >: no candidate, -1).
    if (!greedy && score == -INFINITY) continue;
    if (beats(score, int32_t(i), best, best_id)) best = score, best_id = int32_t(i);
  }
  s_score[threadIdx.x] = best;
  s_id[threadIdx.x] = best_id;
  s_sum[threadIdx.x] = mx;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (int(threadIdx.x) < half) {
      const int o = int(threadIdx.x) + half;
      if (beats(s_score[o], s_id[o], s_score[threadIdx.x], s_id[threadIdx.x]))
        s_score[threadIdx.x] = s_score[o], s_id[threadIdx.x] = s_id[o];
      s_sum[threadIdx.x] = fmax(s_sum[threadIdx.x], s_sum[o]);
    }
    __syncthreads();
  }
  const int32_t token = s_id[0];
  const double row_max = s_sum[0];
  __syncthreads();

  double z = 0.0;
  for (size_t i = threadIdx.x; i < vocab; i += kThreads) z += exp(double(row[i]) - row_max);
  s_sum[threadIdx.x] = z;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (int(threadIdx.x) < half) s_sum[threadIdx.x] += s_sum[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    tokens[m] = token;
    if (logprobs != nullptr)
      logprobs[m] = token < 0 ? NAN : float(double(row[token]) - row_max - log(s_sum[0]));
  }
}

cudaError_t launch_sample_rows(const float* logits, size_t M, size_t vocab,
                               const float* temperature, const uint64_t* seed,
                               const int64_t* position, int32_t* tokens, float* logprobs,
                               cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (vocab == 0 || vocab > 0x7fffffffu || M > 0x7fffffffu) return cudaErrorInvalidValue;
  sample_rows_kernel<<<unsigned(M), kThreads, 0, stream>>>(logits, vocab, temperature, seed,
                                                           position, tokens, logprobs);
  return cudaGetLastError();
}

}  // namespace vc::cuda

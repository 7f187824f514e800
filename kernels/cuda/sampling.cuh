// Token choice on the GPU, the CUDA counterpart of runtime/sampler.cpp for the cases
// without top-k / top-p: per row, greedy (argmax, lowest id among equals) or
// seeded Gumbel-max, token = argmax_i (logits[i] / T - log(-log(u_i))) with
// u_i = gumbel_uniform(seed, position, i), the CPU's counter-based hash (splitmix64
// of seed, position and token) -- the same noise for the same (seed, position), so
// the drafter's draw and the verifier's can be compared as on the CPU. Scores and
// the log-probability are computed in double as on the CPU; the log-probability of
// the chosen token is log softmax(logits)[token], the sum of exponentials reduced in
// a fixed tree (not the CPU's sequential order): equal to the CPU's after rounding to
// float but for a rare last bit. Rows needing top-k or top-p are not handled here.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace vc::cuda {

/// Launches one thread block per row on `stream` (asynchronous). Device arrays:
/// logits[M, vocab]; temperature[M] (<= 0: greedy), seed[M], position[M] (the
/// position the token will occupy); tokens[M] out (-1 when no logit is a number,
/// or, sampling, none gives a finite score: where the CPU sampler throws);
/// logprobs[M] out (may be nullptr). Returns the launch status (cudaSuccess for
/// M == 0; cudaErrorInvalidValue for vocab == 0 or above 2^31).
cudaError_t launch_sample_rows(const float* logits, size_t M, size_t vocab,
                               const float* temperature, const uint64_t* seed,
                               const int64_t* position, int32_t* tokens, float* logprobs,
                               cudaStream_t stream);

}  // namespace vc::cuda

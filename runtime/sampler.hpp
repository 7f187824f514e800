// Token choice from logits: greedy, or seeded sampling by the Gumbel-max rule.
//
// Sampling draws token argmax_i (logits[i] / T + g_i) over the tokens that survive
// top-k and top-p, where g_i = -log(-log(u_i)) and u_i is a hash of
// (seed, position, i). The noise depends only on the seed and the absolute position,
// so the same seed gives the same text, and a drafter drawing over its own logits
// with the same noise agrees with the verifier exactly when their draws coincide
// (DESIGN.md, exactness contract 2).
#pragma once
#include <cstdint>
#include <span>

namespace vc {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;

  [[nodiscard]] bool greedy() const { return temperature <= 0.0f; }
};

/// Validates ranges; throws vc::Error naming the field.
void validate(const SamplingParams& p);

/// Index of the largest logit (the lowest index among equals).
[[nodiscard]] int32_t argmax(std::span<const float> logits);

/// The token chosen for absolute position `position` (the position the token will
/// occupy in the sequence).
[[nodiscard]] int32_t sample_token(std::span<const float> logits, const SamplingParams& p,
                                   int64_t position);

/// log softmax(logits)[token], computed in double and rounded to float; the same
/// logits always give the same bits.
[[nodiscard]] float token_logprob(std::span<const float> logits, int32_t token);

/// The uniform (0, 1) variate for (seed, position, token): a counter-based hash.
[[nodiscard]] double gumbel_uniform(uint64_t seed, int64_t position, int32_t token);

}  // namespace vc

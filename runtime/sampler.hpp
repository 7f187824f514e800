// Token choice from logits: greedy, or seeded sampling by the Gumbel-max rule.
//
// Sampling draws token argmax_i (logits[i] / T + g_i) over the tokens that survive
// top-k and top-p, where g_i = -log(-log(u_i)) and u_i is a hash of
// (seed, position, i). The noise depends only on the seed and the absolute position,
// so the same seed gives the same text, and a drafter drawing over its own logits
// with the same noise agrees with the verifier exactly when their draws coincide
// (DESIGN.md, exactness contract 2).
//
// Log-probabilities are log softmax of the same logits the token is drawn from, before
// temperature and filtering (the model's distribution, as OpenAI reports them); the
// top-N alternatives come from the same pass, so the chosen token's entry in that
// list carries exactly the bits of its own logprob.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace vc {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // 1: no limit
  uint64_t seed = 0;
  /// Alternatives reported per emitted token, 0..kMaxTopLogprobs (0: none). Never
  /// changes which token is chosen.
  int top_logprobs = 0;

  [[nodiscard]] bool greedy() const { return temperature <= 0.0f; }
};

/// The most alternatives a request may ask for per token (OpenAI's chat limit).
inline constexpr int kMaxTopLogprobs = 20;

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

/// One candidate token and its log-probability.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  friend bool operator==(const TokenLogprob&, const TokenLogprob&) = default;
};

/// What is reported for one emitted token: its logprob, and the `top_n` most likely
/// tokens (sorted by logprob descending, ties by the smaller id; the chosen token is
/// in it exactly when it ranks among them).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

/// token_logprob(logits, token) and the top_n list from one normalizer pass; every
/// logprob has the bits token_logprob gives for that id.
[[nodiscard]] TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token,
                                           size_t top_n);

/// The uniform (0, 1) variate for (seed, position, token): a counter-based hash.
[[nodiscard]] double gumbel_uniform(uint64_t seed, int64_t position, int32_t token);

}  // namespace vc

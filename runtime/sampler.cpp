// Greedy and Gumbel-max sampling with top-k / top-p filtering.
#include "runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw Error("sampling: temperature must be a finite number >= 0, got " +
                std::to_string(p.temperature));
  if (p.top_k < 0) throw Error("sampling: top_k must be >= 0, got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw Error("sampling: top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    throw Error("sampling: top_logprobs must be in 0.." + std::to_string(kMaxTopLogprobs) +
                ", got " + std::to_string(p.top_logprobs));
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double gumbel_uniform(uint64_t seed, int64_t position, int32_t token) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ uint64_t(position));
  h = splitmix64(h ^ uint64_t(uint32_t(token)));
  return (double(h >> 11) + 0.5) * 0x1.0p-53;  // strictly inside (0, 1)
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  if (p.greedy()) return argmax(logits);
  const size_t n = logits.size();
  // Candidates by descending logit (ties: lower id first), cut by top-k then top-p.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  size_t keep = n;
  if (p.top_k > 0 && size_t(p.top_k) < n) keep = size_t(p.top_k);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  if (keep < n || p.top_p < 1.0f) {
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(keep), order.end(), by_logit);
    order.resize(keep);
  }
  const double inv_t = 1.0 / double(p.temperature);
  if (p.top_p < 1.0f) {
    const double mx = double(logits[size_t(order[0])]) * inv_t;
    double z = 0.0;
    for (int32_t i : order) z += std::exp(double(logits[size_t(i)]) * inv_t - mx);
    double cum = 0.0;
    size_t cut = order.size();
    for (size_t j = 0; j < order.size(); ++j) {
      cum += std::exp(double(logits[size_t(order[j])]) * inv_t - mx) / z;
      if (cum >= double(p.top_p)) {
        cut = j + 1;
        break;
      }
    }
    order.resize(cut);
  }
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int32_t i : order) {
    const double u = gumbel_uniform(p.seed, position, i);
    const double score = double(logits[size_t(i)]) * inv_t - std::log(-std::log(u));
    if (score > best_score || (score == best_score && i < best)) {
      best_score = score;
      best = i;
    }
  }
  if (best < 0)
    throw Error("sampling: no candidate has a finite score at position " +
                std::to_string(position) + " (the model's logits are NaN)");
  return best;
}

namespace {

// log softmax(x)[i] = x[i] - max - log(sum exp(x - max)), in double.
struct LogNormalizer {
  double max = 0;
  double log_z = 0;
  [[nodiscard]] float logprob(float logit) const { return float(double(logit) - max - log_z); }
};

LogNormalizer log_normalizer(std::span<const float> logits) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, double(v));
  double z = 0.0;
  for (float v : logits) z += std::exp(double(v) - mx);
  return {mx, std::log(z)};
}

// a ranks before b: the larger logprob, then the smaller id.
bool ranks_before(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
}

}  // namespace

float token_logprob(std::span<const float> logits, int32_t token) {
  return log_normalizer(logits).logprob(logits[size_t(token)]);
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, size_t top_n) {
  const LogNormalizer norm = log_normalizer(logits);
  TokenLogprobs out;
  out.logprob = norm.logprob(logits[size_t(token)]);
  top_n = std::min(top_n, logits.size());
  if (top_n == 0) return out;
  // One pass keeping the best top_n sorted: a token that does not beat the last
  // kept one costs a compare (top_n <= kMaxTopLogprobs in practice).
  std::vector<TokenLogprob>& top = out.top;
  top.reserve(top_n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob c{int32_t(i), norm.logprob(logits[i])};
    if (top.size() == top_n && !ranks_before(c, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), c, ranks_before), c);
    if (top.size() > top_n) top.pop_back();
  }
  return out;
}

}  // namespace vc

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

float token_logprob(std::span<const float> logits, int32_t token) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, double(v));
  double z = 0.0;
  for (float v : logits) z += std::exp(double(v) - mx);
  return float(double(logits[size_t(token)]) - mx - std::log(z));
}

}  // namespace vc

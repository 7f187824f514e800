// Greedy and Gumbel-max sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/sampler.hpp"

namespace vc {
namespace {

TEST(sampler, greedy_picks_the_largest_logit_and_the_lowest_id_among_ties) {
  std::vector<float> l{0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_token(l, SamplingParams{}, 5), 1);
}

// An independent reference of the documented rule (sampler.hpp): u_i = a splitmix64
// chain of (seed, position, i) mapped into (0, 1), token = argmax_i over the k
// largest logits of logits[i] / T - log(-log(u_i)). Written from the description,
// not by calling the sampler, so a change of the noise or the rule shows up here.
uint64_t reference_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int reference_draw(const std::vector<float>& l, double T, size_t top_k, uint64_t seed, int64_t pos) {
  std::vector<size_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  if (top_k > 0 && top_k < ids.size()) ids.resize(top_k);
  int best = -1;
  long double best_score = 0;
  for (size_t i : ids) {
    uint64_t h = reference_splitmix64(seed);
    h = reference_splitmix64(h ^ uint64_t(pos));
    h = reference_splitmix64(h ^ uint64_t(uint32_t(i)));
    const double u = (double(h >> 11) + 0.5) / 9007199254740992.0;  // 2^53
    const long double score = (long double)(double(l[i]) / T) - std::log(-std::log(u));
    if (best < 0 || score > best_score || (score == best_score && int(i) < best)) {
      best = int(i);
      best_score = score;
    }
  }
  return best;
}

TEST(sampler, draws_the_token_an_independent_gumbel_max_computation_draws) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(float(i));
  size_t mismatches = 0, cases = 0;
  for (const float T : {1.0f, 0.7f, 2.5f})
    for (const int k : {0, 5})
      for (const uint64_t seed : {uint64_t(1234), uint64_t(99), ~uint64_t(0)})
        for (int64_t pos = 0; pos < 40; ++pos) {
          ++cases;
          const int got = sample_token(l, SamplingParams{T, k, 1.0f, seed}, pos);
          const int want = reference_draw(l, T, size_t(k), seed, pos);
          if (got != want) {
            ++mismatches;
            ADD_FAILURE() << "T=" << T << " top_k=" << k << " seed=" << seed << " pos=" << pos
                          << ": sampler drew " << got << ", reference " << want;
          }
        }
  EXPECT_EQ(mismatches, 0u) << "of " << cases;
  // Another seed draws other tokens (the noise depends on it).
  int differ = 0;
  for (int pos = 0; pos < 50; ++pos)
    differ += sample_token(l, SamplingParams{1.0f, 0, 1.0f, 1234}, pos) !=
              sample_token(l, SamplingParams{1.0f, 0, 1.0f, 99}, pos);
  EXPECT_GT(differ, 10) << "another seed should draw other tokens";
}

TEST(sampler, all_nan_logits_are_an_error_not_token_minus_one) {
  std::vector<float> l(8, std::nanf(""));
  try {
    (void)sample_token(l, SamplingParams{1.0f, 0, 1.0f, 3}, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
}

TEST(sampler, gumbel_max_draws_follow_the_softmax_distribution) {
  std::vector<float> l{1.0f, 0.0f, -1.0f, 0.5f};
  const float T = 0.8f;
  SamplingParams p{T, 0, 1.0f, 7};
  std::vector<int> counts(l.size());
  const int n = 40000;
  for (int pos = 0; pos < n; ++pos) ++counts[size_t(sample_token(l, p, pos))];
  double z = 0;
  for (float v : l) z += std::exp(double(v) / T);
  for (size_t i = 0; i < l.size(); ++i) {
    const double expect = std::exp(double(l[i]) / T) / z;
    const double sd = std::sqrt(expect * (1 - expect) / n);
    EXPECT_NEAR(double(counts[i]) / n, expect, 5 * sd) << "token " << i;
  }
}

TEST(sampler, top_k_one_and_a_tiny_top_p_reduce_to_greedy) {
  std::vector<float> l{0.3f, 0.1f, 0.9f, 0.2f};
  for (int pos = 0; pos < 30; ++pos) {
    EXPECT_EQ(sample_token(l, SamplingParams{1.0f, 1, 1.0f, 3}, pos), 2);
    EXPECT_EQ(sample_token(l, SamplingParams{1.0f, 0, 1e-6f, 3}, pos), 2);
  }
}

TEST(sampler, top_k_never_draws_outside_the_k_largest) {
  std::vector<float> l{0.0f, 3.0f, 2.9f, 0.1f, 2.8f, -5.0f};
  for (int pos = 0; pos < 500; ++pos) {
    const int t = sample_token(l, SamplingParams{5.0f, 3, 1.0f, 11}, pos);
    EXPECT_TRUE(t == 1 || t == 2 || t == 4) << t;
  }
}

TEST(sampler, logprob_is_the_log_softmax_of_the_token) {
  std::vector<float> l{1.0f, 2.0f, 3.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(token_logprob(l, 2), std::log(std::exp(3.0) / z), 1e-6);
}

TEST(sampler, rejects_out_of_range_settings_naming_the_field) {
  try {
    validate(SamplingParams{1.0f, 0, 1.5f, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(SamplingParams{-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(validate(SamplingParams{1.0f, -2, 1.0f, 0}), Error);
}

}  // namespace
}  // namespace vc

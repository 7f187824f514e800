// Greedy and Gumbel-max sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/sampler.hpp"

namespace vc {
namespace {

TEST(sampler, greedy_picks_the_largest_logit_and_the_lowest_id_among_ties) {
  std::vector<float> l{0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_token(l, SamplingParams{}, 5), 1);
}

TEST(sampler, the_same_seed_and_position_always_draw_the_same_token) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(float(i));
  SamplingParams p{1.0f, 0, 1.0f, 1234};
  for (int pos = 0; pos < 20; ++pos) EXPECT_EQ(sample_token(l, p, pos), sample_token(l, p, pos));
  int differ = 0;
  SamplingParams q = p;
  q.seed = 99;
  for (int pos = 0; pos < 50; ++pos) differ += sample_token(l, p, pos) != sample_token(l, q, pos);
  EXPECT_GT(differ, 10) << "another seed should draw other tokens";
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

// DraftLengthPolicy: the fixed length is capped by what may still be emitted; the
// adaptive choice follows acceptance and the relative cost of drafting and
// verifying; expected_rate is the closed form of the header.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/error.hpp"
#include "runtime/draft_length.hpp"

namespace vc {
namespace {

// (1 - a^(L+1)) / (1 - a): expected tokens a round of L drafts emits.
double expected_tokens(double a, size_t L) {
  return (1.0 - std::pow(a, double(L + 1))) / (1.0 - a);
}

TEST(draft_length, fixed_returns_the_length_capped_at_one_less_than_the_remaining_tokens) {
  const auto p = DraftLengthPolicy::fixed(16);
  EXPECT_FALSE(p.is_adaptive());
  EXPECT_EQ(16u, p.next(1000));
  EXPECT_EQ(16u, p.next(17));
  EXPECT_EQ(15u, p.next(16));
  EXPECT_EQ(4u, p.next(5));
  EXPECT_EQ(0u, p.next(1));  // one token left: the verify pass alone emits it
  EXPECT_EQ(0u, p.next(0));
  EXPECT_EQ(0u, DraftLengthPolicy::fixed(0).next(100));
}

TEST(draft_length, fixed_ignores_what_it_observes) {
  auto p = DraftLengthPolicy::fixed(6);
  for (int i = 0; i < 20; ++i) p.observe(6, 0, 0.006, 0.5);
  EXPECT_EQ(6u, p.next(100));
}

TEST(draft_length, adaptive_starts_with_eight_drafts_before_any_measurement) {
  const auto p = DraftLengthPolicy::adaptive(64);
  EXPECT_TRUE(p.is_adaptive());
  EXPECT_EQ(8u, p.next(1000));
  EXPECT_EQ(3u, p.next(4));
  EXPECT_EQ(0u, p.next(1));
  EXPECT_EQ(4u, DraftLengthPolicy::adaptive(4).next(1000));
}

TEST(draft_length, adaptive_chooses_long_drafts_when_they_are_accepted_and_verify_is_expensive) {
  auto p = DraftLengthPolicy::adaptive(64);
  for (int i = 0; i < 50; ++i) p.observe(8, 8, 8 * 0.001, 0.050);  // 1 ms a step, 50 ms a pass
  EXPECT_GT(p.acceptance(), 0.99);
  EXPECT_NEAR(0.001, p.draft_step_seconds(), 1e-12);
  const size_t L = p.next(1000);
  EXPECT_GE(L, 16u);
  EXPECT_LE(L, 64u);
  // Still capped by what may be emitted.
  EXPECT_EQ(9u, p.next(10));
}

TEST(draft_length, adaptive_chooses_short_drafts_when_nothing_is_accepted) {
  auto p = DraftLengthPolicy::adaptive(64);
  for (int i = 0; i < 50; ++i) p.observe(8, 0, 8 * 0.001, 0.050);
  EXPECT_LT(p.acceptance(), 0.05);
  const size_t L = p.next(1000);
  EXPECT_GE(L, 1u);
  EXPECT_LE(L, 2u);
}

TEST(draft_length, adaptive_chooses_short_drafts_when_verification_costs_about_a_draft_step_a_row) {
  auto p = DraftLengthPolicy::adaptive(64);
  // Every draft accepted, but a verify pass of r rows costs r draft steps: the line
  // fitted through passes of different sizes makes each draft cost two steps.
  const size_t lengths[] = {2, 4, 8, 16, 6, 12, 3, 10};
  for (int i = 0; i < 4; ++i)
    for (size_t d : lengths) p.observe(d, d, double(d) * 0.001, double(d + 1) * 0.001);
  EXPECT_GT(p.acceptance(), 0.95);
  const size_t L = p.next(1000);
  EXPECT_GE(L, 1u);
  EXPECT_LE(L, 2u);
  // And the rates say why: one draft beats many.
  EXPECT_GT(p.expected_rate(1), p.expected_rate(16));
}

TEST(draft_length, expected_rate_is_the_closed_form_over_one_measured_pass) {
  auto p = DraftLengthPolicy::adaptive(64);
  // Prior 8 matches, 2 mismatches (decayed by 0.9), then 2 of 4 accepted.
  p.observe(4, 2, 0.004, 0.010);
  const double a = (8.0 * 0.9 + 2.0) / (8.0 * 0.9 + 2.0 + 2.0 * 0.9 + 1.0);
  EXPECT_NEAR(a, p.acceptance(), 1e-12);
  EXPECT_NEAR(0.001, p.draft_step_seconds(), 1e-15);
  // One pass: verify cost is its time whatever the rows.
  for (size_t L = 0; L <= 40; ++L) {
    const double want = expected_tokens(a, L) / (double(L) * 0.001 + 0.010);
    EXPECT_NEAR(want, p.expected_rate(L), 1e-9 * want) << "L=" << L;
  }
}

TEST(draft_length, expected_rate_is_the_closed_form_with_a_verify_cost_fitted_per_row) {
  auto p = DraftLengthPolicy::adaptive(64);
  p.observe(4, 4, 0.004, 0.010);  // 5 rows: 10 ms
  p.observe(8, 3, 0.008, 0.018);  // 9 rows: 18 ms -> 2 ms a row, nothing fixed
  double m = 8.0 * 0.9 + 4.0, x = 2.0 * 0.9 + 0.0;
  m = m * 0.9 + 3.0;
  x = x * 0.9 + 1.0;
  const double a = m / (m + x);
  EXPECT_NEAR(a, p.acceptance(), 1e-12);
  EXPECT_NEAR(0.001, p.draft_step_seconds(), 1e-15);
  for (size_t L = 0; L <= 40; ++L) {
    const double cost = double(L) * 0.001 + 0.002 * double(L + 1);
    const double want = expected_tokens(a, L) / cost;
    EXPECT_NEAR(want, p.expected_rate(L), 1e-9 * want) << "L=" << L;
  }
  // The choice maximises the rate over [1, 64].
  const size_t best = p.next(1000);
  for (size_t L = 1; L <= 64; ++L) EXPECT_GE(p.expected_rate(best), p.expected_rate(L)) << L;
}

TEST(draft_length, acceptance_stays_below_one_so_the_rate_stays_finite) {
  auto p = DraftLengthPolicy::adaptive(64);
  for (int i = 0; i < 500; ++i) p.observe(16, 16, 0.016, 0.030);
  EXPECT_LE(p.acceptance(), 0.999);
  for (size_t L : {0u, 1u, 16u, 64u}) EXPECT_TRUE(std::isfinite(p.expected_rate(L)));
  EXPECT_EQ(64u, p.next(1000));
}

TEST(draft_length, a_measured_row_cost_curve_shows_the_knee_that_passes_of_one_length_cannot) {
  // Every observed pass had 9 rows (8 drafts) and cost 10 ms: a fit from them alone
  // has no slope and sees verification as free per row, so only the draft steps
  // and the acceptance bound the length: long drafts.
  auto blind = DraftLengthPolicy::adaptive(64);
  for (int i = 0; i < 16; ++i) blind.observe(8, 8, 0.008, 0.010);
  EXPECT_GT(blind.next(1000), 40u);
  // The curve: flat to 16 rows (memory-bound), then 1 ms a row (compute-bound).
  auto seen = DraftLengthPolicy::adaptive(64);
  seen.set_row_costs({{1, 0.008}, {16, 0.008}, {64, 0.056}});
  for (int i = 0; i < 16; ++i) seen.observe(8, 8, 0.008, 0.010);
  // Observed passes cost 2 ms above the curve: a constant the estimate keeps.
  EXPECT_NEAR(seen.verify_seconds(9), 0.010, 1e-12);
  EXPECT_NEAR(seen.verify_seconds(40), 0.008 + 24 * 0.001 + 0.002, 1e-12);
  EXPECT_NEAR(seen.verify_seconds(80), 0.056 + 16 * 0.001 + 0.002, 1e-12);  // last slope
  size_t best = 0;
  double best_rate = -1;
  for (size_t L = 1; L <= 64; ++L)
    if (seen.expected_rate(L) > best_rate) best_rate = seen.expected_rate(L), best = L;
  EXPECT_EQ(best, seen.next(1000));
  // Near the knee: 15 drafts verify in 16 rows at the flat cost.
  EXPECT_GE(seen.next(1000), 12u);
  EXPECT_LE(seen.next(1000), 30u);
  EXPECT_GT(seen.expected_rate(seen.next(1000)), seen.expected_rate(blind.next(1000)));
}

TEST(draft_length, a_row_cost_curve_that_is_empty_unsorted_or_negative_is_an_error) {
  auto p = DraftLengthPolicy::adaptive(64);
  EXPECT_THROW(p.set_row_costs({}), Error);
  EXPECT_THROW(p.set_row_costs({{4, 0.01}, {2, 0.02}}), Error);
  EXPECT_THROW(p.set_row_costs({{1, -0.01}}), Error);
  EXPECT_THROW(p.set_row_costs({{0, 0.01}}), Error);
  p.set_row_costs({{1, 0.002}});  // one point: proportional to rows
  EXPECT_NEAR(p.verify_seconds(5), 0.010, 1e-12);
}

}  // namespace
}  // namespace vc

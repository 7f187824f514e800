// The drafter's budget of n-gram proposal rows per pass: the measured curve of pass
// times, the confirmation chance, and which proposal tokens a pass keeps.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/error.hpp"
#include "runtime/proposal_budget.hpp"

namespace vc {
namespace {

using Sizes = std::vector<size_t>;

PassCostCurve curve_of(const std::vector<std::pair<size_t, double>>& points) {
  PassCostCurve c;
  for (const auto& [rows, seconds] : points) c.observe(rows, seconds);
  return c;
}

TEST(pass_cost_curve, interpolates_between_measured_row_counts_and_is_flat_past_the_ends) {
  const PassCostCurve c = curve_of({{2, 0.040}, {6, 0.080}});
  EXPECT_DOUBLE_EQ(c.cost(2), 0.040);
  EXPECT_DOUBLE_EQ(c.cost(4), 0.060);
  EXPECT_DOUBLE_EQ(c.cost(5), 0.070);
  EXPECT_DOUBLE_EQ(c.cost(1), 0.040);   // below the smallest: the smallest's
  EXPECT_DOUBLE_EQ(c.cost(30), 0.080);  // above the largest: untried, optimistic
  EXPECT_TRUE(PassCostCurve{}.empty());
  EXPECT_DOUBLE_EQ(PassCostCurve{}.cost(3), 0.0);
}

TEST(pass_cost_curve, moves_a_quarter_of_the_way_to_each_new_time) {
  PassCostCurve c = curve_of({{4, 0.100}});
  c.observe(4, 0.200);
  EXPECT_DOUBLE_EQ(c.cost(4), 0.125);
  EXPECT_THROW(c.observe(0, 0.1), Error);
}

TEST(confirm_rate, follows_laplaces_rule_over_confirmed_tokens_and_refusals) {
  EXPECT_DOUBLE_EQ(confirm_rate(0, 0), 0.5);
  EXPECT_DOUBLE_EQ(confirm_rate(8, 0), 0.9);
  EXPECT_DOUBLE_EQ(confirm_rate(0, 8), 0.1);
}

TEST(keep_proposals, keeps_every_proposal_when_extra_rows_cost_nothing) {
  const PassCostCurve flat = curve_of({{1, 0.05}, {64, 0.05}});
  const std::vector<ProposalOffer> offers{{8, 0.3}, {0, 0.9}, {5, 0.9}};
  EXPECT_EQ(keep_proposals(3, offers, flat), (Sizes{8, 0, 5}));
  // Nothing measured yet: every proposal too (the passes then measure the curve).
  EXPECT_EQ(keep_proposals(3, offers, PassCostCurve{}), (Sizes{8, 0, 5}));
}

TEST(keep_proposals, keeps_none_when_every_row_costs_the_same_and_confirmation_is_not_certain) {
  // Compute-bound: the cost is linear in the rows. A proposal token adds a row's cost
  // and less than a row's tokens.
  const PassCostCurve linear = curve_of({{1, 0.01}, {2, 0.02}, {4, 0.04}, {8, 0.08}, {16, 0.16}});
  const std::vector<ProposalOffer> offers{{8, 0.95}, {8, 0.5}};
  EXPECT_EQ(keep_proposals(2, offers, linear), (Sizes{0, 0}));
}

TEST(keep_proposals, fills_the_flat_part_of_the_curve_with_the_likeliest_tokens_first) {
  // Flat up to 4 rows, then linear: 2 base rows leave 2 rows that cost nothing. The
  // likelier request's first two tokens (0.9, 0.81) beat the other's first (0.5).
  const PassCostCurve knee = curve_of({{1, 0.04}, {4, 0.04}, {8, 0.08}, {16, 0.16}});
  const std::vector<ProposalOffer> offers{{8, 0.5}, {8, 0.9}};
  EXPECT_EQ(keep_proposals(2, offers, knee), (Sizes{0, 2}));
  // One base row, rate 0.99: the three free rows take three tokens; a fifth row
  // costs a quarter more for 0.96 of a token on 3.94: not kept.
  const std::vector<ProposalOffer> sure{{8, 0.99}};
  EXPECT_EQ(keep_proposals(1, sure, knee), (Sizes{3}));
}

}  // namespace
}  // namespace vc

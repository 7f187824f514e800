// price_front: recompute the front when fetching a position takes longer than
// prefilling one, by more than the number of requests the front would delay;
// alone always; beside others without both rates measured, never.
#include "actors/front_price.hpp"

#include <gtest/gtest.h>

namespace vc::actors {
namespace {

TEST(front_price, alone_the_front_is_recomputed_whatever_is_measured) {
  const FrontRates none;
  const FrontPrice d = price_front(0, none);
  EXPECT_TRUE(d.recompute);
  EXPECT_NE(d.why.find("alone"), std::string::npos) << d.why;
}

TEST(front_price, beside_others_nothing_is_recomputed_before_both_rates_are_measured) {
  FrontRates rates;
  FrontPrice d = price_front(1, rates);
  EXPECT_FALSE(d.recompute);
  EXPECT_NE(d.why.find("no fetch measured"), std::string::npos) << d.why;
  rates.add_fetch(1000, 10.0);
  d = price_front(1, rates);
  EXPECT_FALSE(d.recompute);
  EXPECT_NE(d.why.find("no prefill measured"), std::string::npos) << d.why;
}

TEST(front_price, beside_n_others_fetching_must_be_more_than_n_times_slower_than_prefilling) {
  FrontRates rates;
  rates.add_fetch(1000, 3.0);    // 3 ms a position over the link
  rates.add_prefill(2000, 2.0);  // 1 ms a position in the prefill
  ASSERT_DOUBLE_EQ(0.003, *rates.fetch_seconds_per_position());
  ASSERT_DOUBLE_EQ(0.001, *rates.prefill_seconds_per_position());
  for (size_t others : {1, 2}) {
    const FrontPrice d = price_front(others, rates);
    EXPECT_TRUE(d.recompute) << others << ": " << d.why;
    EXPECT_EQ(others, d.others);
    EXPECT_DOUBLE_EQ(0.003, d.fetch_per_position);
    EXPECT_DOUBLE_EQ(0.001, d.prefill_per_position);
  }
  const FrontPrice three = price_front(3, rates);  // 3 ms is not more than 3 x 1 ms
  EXPECT_FALSE(three.recompute) << three.why;
  EXPECT_NE(three.why.find("fetch, then prefill"), std::string::npos) << three.why;
  EXPECT_NE(three.why.find("beside 3"), std::string::npos) << three.why;
}

TEST(front_price, rates_are_sums_over_positions_and_empty_or_instant_samples_add_nothing) {
  FrontRates rates;
  rates.add_fetch(0, 5.0);
  rates.add_fetch(100, 0.0);
  rates.add_prefill(0, 1.0);
  EXPECT_FALSE(rates.fetch_seconds_per_position());
  EXPECT_FALSE(rates.prefill_seconds_per_position());
  rates.add_fetch(100, 1.0);
  rates.add_fetch(300, 1.0);  // 2 s over 400 positions, not the mean of 10 and 3.3 ms
  EXPECT_DOUBLE_EQ(0.005, *rates.fetch_seconds_per_position());
}

}  // namespace
}  // namespace vc::actors

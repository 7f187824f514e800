// The remote store's skip window after a transport fault, on a clock the test moves.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kvtiers/remote/store_health.hpp"

namespace vc {
namespace {

using std::chrono::milliseconds;

TEST(store_health, a_fault_skips_the_store_until_the_retry_pause_has_passed) {
  StoreHealth h(milliseconds(5000));
  const auto t0 = StoreHealth::clock::now();
  EXPECT_EQ(h.skip_reason(t0), "") << "a store that never failed is asked";
  h.failed("remote store redis://127.0.0.1:1: cannot connect", t0);
  const std::string why = h.skip_reason(t0 + milliseconds(1200));
  EXPECT_NE(why.find("store skipped"), std::string::npos) << why;
  EXPECT_NE(why.find("cannot connect"), std::string::npos) << why;
  EXPECT_NE(why.find("1.2 s ago"), std::string::npos) << why;
  EXPECT_NE(why.find("3.8 s from now"), std::string::npos) << why;
  EXPECT_NE(h.skip_reason(t0 + milliseconds(4999)), "");
  EXPECT_EQ(h.skipped(), 2u);
  EXPECT_EQ(h.skip_reason(t0 + milliseconds(5000)), "") << "tried again once the pause is over";
  EXPECT_EQ(h.skipped(), 2u);
}

TEST(store_health, an_answer_ends_the_skip_window) {
  StoreHealth h(milliseconds(5000));
  const auto t0 = StoreHealth::clock::now();
  h.failed("no reply within 300 ms", t0);
  h.answered();  // another caller reached the store meanwhile
  EXPECT_EQ(h.skip_reason(t0 + milliseconds(1)), "");
}

TEST(store_health, a_zero_retry_pause_never_skips) {
  StoreHealth h(milliseconds(0));
  const auto t0 = StoreHealth::clock::now();
  h.failed("cannot connect", t0);
  EXPECT_EQ(h.skip_reason(t0), "");
  EXPECT_EQ(h.skipped(), 0u);
}

}  // namespace
}  // namespace vc

// Tests of the throttling proxy's link schedule (tools/vericache/throttled_proxy.hpp):
// a busy link delivers its nominal rate even when the sender is late each time, and
// an idle one banks no more than the slack.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "tools/vericache/throttled_proxy.hpp"

namespace vc::cli {
namespace {

using Clock = LinkPacer::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(link_pacer, bytes_pass_at_the_nominal_rate_one_after_another) {
  const Clock::time_point t0{};
  LinkPacer p(1e6, milliseconds(2), t0);  // 1000 bytes per ms
  EXPECT_EQ(p.reserve(1000, t0), t0 + milliseconds(1));
  EXPECT_EQ(p.reserve(1000, t0), t0 + milliseconds(2));  // queued behind the first
}

TEST(link_pacer, a_sender_late_every_time_still_gets_the_nominal_rate) {
  const Clock::time_point t0{};
  LinkPacer p(1e6, milliseconds(2), t0);
  Clock::time_point done = t0;
  for (int i = 0; i < 1000; ++i) done = p.reserve(1000, done + microseconds(300));
  // 1000 pieces of 1 ms each: one second (the 0.3 ms lost per piece is made up;
  // a schedule restarting at each late call would end at 1.3 s).
  EXPECT_EQ(done, t0 + milliseconds(1000));
}

TEST(link_pacer, an_idle_link_banks_no_more_than_the_slack) {
  const Clock::time_point t0{};
  LinkPacer p(1e6, milliseconds(2), t0);
  (void)p.reserve(1000, t0);
  const Clock::time_point later = t0 + milliseconds(100);
  // 2 ms of credit: the first 2000 bytes pass at once, the next at the rate.
  EXPECT_EQ(p.reserve(2000, later), later);
  EXPECT_EQ(p.reserve(1000, later), later + milliseconds(1));
}

TEST(link_pacer, a_rate_so_slow_its_time_leaves_the_clock_saturates_instead_of_wrapping) {
  const Clock::time_point t0{};
  LinkPacer p(1e-21, milliseconds(2), t0);  // 1 byte: 3e28 years, beyond the clock
  const Clock::time_point first = p.reserve(1, t0);
  EXPECT_GT(first, t0 + std::chrono::hours(24 * 365 * 50));
  // Booked again and again, it stays there (a sum past the clock's range wrapped).
  for (int i = 0; i < 5; ++i) EXPECT_GE(p.reserve(1, t0), first) << i;
}

TEST(throttled_proxy, a_negative_or_nan_rate_is_refused_naming_it) {
  for (const double rate : {-1.0, std::nan("")}) {
    try {
      ThrottledProxy proxy("127.0.0.1", 1, rate);
      FAIL() << "constructed at " << rate;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("the rate must be 0 (unthrottled) or positive"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace vc::cli

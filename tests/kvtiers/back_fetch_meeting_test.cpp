// BackFetchMeeting and meet_back_fetch: a front prefill from the first chunk up and
// RemoteTier::fetch_back from the last one down on another thread (a real
// redis-server), as the engine's drafter and net_fetcher run them. Whoever takes a
// chunk, the entry ends up with the prefix bit for bit; the front waits for the run
// only once the fetcher has claimed a chunk; a fetcher that never started costs the
// front nothing; a throwing front stops the fetcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/kvtiers/remote_tier_support.hpp"

namespace vc {
namespace {

using test::layer_bytes;

struct back_fetch_meeting : ::testing::Test {
  test::RedisServer server;
  HostFullTier src{test::small_kv()}, dst{test::small_kv()};
  std::vector<int32_t> prompt = test::tokens(44);  // 5 whole chunks of 8
  void SetUp() override {
    if (!server.available()) GTEST_SKIP() << server.reason();
    test::fill(src, 1, prompt.size());
  }
  // The front's prefill of chunk f into request `id` of dst: src's KV of it.
  void copy_chunk(uint64_t id, size_t f) {
    std::vector<std::byte> k(src.staging_bytes(8)), v(k.size());
    for (size_t l = 0; l < 2; ++l) {
      static_cast<FullTier&>(src).read_blocks(1, l, f * 2, 2, k.data(), v.data());
      static_cast<FullTier&>(dst).write_blocks(id, l, f * 2, 2, k.data(), v.data());
    }
  }
  void expect_prefix(uint64_t id, size_t positions) {
    ASSERT_EQ(dst.length(id), positions);
    for (size_t l = 0; l < 2; ++l)
      EXPECT_EQ(layer_bytes(dst, id, l, positions), layer_bytes(src, 1, l, positions)) << "layer " << l;
  }
};

TEST(back_fetch_meeting_claims, a_chunk_goes_to_the_fetcher_only_above_the_front_and_the_front_stops_below_its_claim) {
  BackFetchMeeting m(5, 8);
  EXPECT_TRUE(m.may_take(0));
  EXPECT_FALSE(m.claimed());
  m.took(2);
  EXPECT_FALSE(m.wanted(1)) << "the front has taken chunk 1";
  EXPECT_TRUE(m.wanted(3));
  EXPECT_TRUE(m.claimed());
  EXPECT_TRUE(m.may_take(2));
  EXPECT_FALSE(m.may_take(3)) << "the fetcher holds chunk 3";
  m.stop();
  EXPECT_FALSE(m.wanted(4)) << "a stopped front leaves the fetcher nothing";
  EXPECT_EQ(m.delivered(), nullptr);
  RemoteBackFetch first;
  first.end = 5;
  m.deliver(first, ChunkLayout{});
  RemoteBackFetch second;
  second.end = 2;
  m.deliver(second, ChunkLayout{});
  ASSERT_NE(m.delivered(), nullptr);
  EXPECT_EQ(m.delivered()->end, 5u) << "only the first delivery counts";
}

TEST_F(back_fetch_meeting, a_slow_front_and_a_fetcher_on_its_own_thread_fill_the_prefix_bit_for_bit) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  BackFetchMeeting m(5, 8);
  std::thread fetcher([&] { m.deliver(r.fetch_back(prompt, 40, [&](size_t c) { return m.wanted(c); }), r.layout()); });
  dst.create(2);
  // Each chunk of the front takes long enough for the fetcher to come down a chunk.
  const MetPrefix met = meet_back_fetch(
      m,
      [&](size_t f) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        copy_chunk(2, f);
      },
      dst, 2, /*wait_for_run=*/false);
  fetcher.join();
  EXPECT_GE(met.front_chunks, 1u);
  EXPECT_GE(met.fetched_chunks, 1u) << "the fetcher took the back";
  EXPECT_EQ(met.cached_chunks(), 5u);
  EXPECT_EQ(met.publish_from, 5u) << "the store held every chunk";
  EXPECT_EQ(met.run.stop_reason, "");
  EXPECT_TRUE(met.run.values.empty());
  EXPECT_TRUE(m.delivered()->values.empty()) << "the values are freed once appended";
  expect_prefix(2, 40);
}

TEST_F(back_fetch_meeting, a_fetcher_that_never_started_costs_the_front_nothing) {
  BackFetchMeeting m(5, 8);
  dst.create(3);
  const auto t0 = std::chrono::steady_clock::now();
  const MetPrefix met = meet_back_fetch(m, [&](size_t f) { copy_chunk(3, f); }, dst, 3, /*wait_for_run=*/false);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(met.front_chunks, 5u);
  EXPECT_EQ(met.fetched_chunks, 0u);
  EXPECT_EQ(met.publish_from, 0u) << "what the store holds is unknown: publish all";
  EXPECT_NE(met.run.stop_reason.find("not in"), std::string::npos) << met.run.stop_reason;
  expect_prefix(3, 40);
  // The fetcher starts late: it finds the front everywhere and takes nothing.
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  const RemoteBackFetch late = r.fetch_back(prompt, 40, [&](size_t c) { return m.wanted(c); });
  EXPECT_TRUE(late.values.empty());
}

TEST_F(back_fetch_meeting, a_front_that_throws_stops_the_fetcher) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  BackFetchMeeting m(5, 8);
  dst.create(4);
  EXPECT_THROW((void)meet_back_fetch(m, [](size_t) { throw std::runtime_error("prefill failed"); }, dst, 4, false),
               std::runtime_error);
  const RemoteBackFetch b = r.fetch_back(prompt, 40, [&](size_t c) { return m.wanted(c); });
  EXPECT_TRUE(b.values.empty()) << "nothing wanted after the front stopped";
}

}  // namespace
}  // namespace vc

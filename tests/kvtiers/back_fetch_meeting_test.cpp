// BackFetchMeeting and meet_back_fetch: a front prefill from the first chunk up and
// a fetch from the last one down on another thread (fetch_back_into against a real
// redis-server), as the engine's drafter and net_fetcher run them. Whoever takes a
// chunk, the entry ends up with the prefix bit for bit; once bound, taken chunks go
// straight into the entry ahead of the front, and before it at most the hold limit
// waits in memory; the front joins what the fetcher took without waiting for the
// chunks in flight; a fetcher that never started costs the front nothing and then
// fetches nothing; a throwing front stops the fetcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <stdexcept>
#include <string>
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

TEST(back_fetch_meeting_claims, a_chunk_goes_to_the_fetcher_only_above_the_front_and_stop_hands_over_its_run) {
  BackFetchMeeting m(5, 8);
  EXPECT_FALSE(m.holds(0));
  EXPECT_TRUE(m.begin(ChunkLayout{}));
  EXPECT_TRUE(m.claim(0));
  EXPECT_TRUE(m.claim(1));
  EXPECT_FALSE(m.take(1, "one", 0)) << "the front has claimed chunk 1";
  EXPECT_TRUE(m.take(4, "four", 1));
  EXPECT_TRUE(m.take(3, "three", 2));
  EXPECT_EQ(m.held_bytes(), 9u) << "unbound: the values wait in memory";
  EXPECT_FALSE(m.holds(2));
  EXPECT_TRUE(m.holds(3));
  EXPECT_FALSE(m.claim(3)) << "the fetcher holds chunk 3";
  EXPECT_FALSE(m.claim(5)) << "past the last chunk";
  m.keep_above(3, "another rank's run ends at chunk 3");
  EXPECT_FALSE(m.take(2, "two", 0)) << "below the group's floor";
  EXPECT_EQ(m.refusal(), "another rank's run ends at chunk 3");
  const RemoteBackFetch held = m.stop();
  EXPECT_EQ(held.first, 3u);
  EXPECT_EQ(held.end, 5u);
  ASSERT_EQ(held.values.size(), 2u);
  EXPECT_EQ(held.values[0].first, "three") << "ascending";
  EXPECT_EQ(held.values[1].second, 1u);
  EXPECT_EQ(held.bytes, 9u);
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_FALSE(m.take(2, "two", 0)) << "a stopped front leaves the fetcher nothing";
  EXPECT_FALSE(m.begin(ChunkLayout{})) << "a fetch that starts now fetches nothing";
  EXPECT_EQ(m.delivered(), nullptr);
  RemoteBackFetch first;
  first.end = 5;
  m.deliver(first);
  RemoteBackFetch second;
  second.end = 2;
  m.deliver(second);
  ASSERT_NE(m.delivered(), nullptr);
  EXPECT_EQ(m.delivered()->end, 5u) << "only the first delivery counts";
}

TEST(back_fetch_meeting_claims, the_fetch_batches_while_the_front_is_far_below_and_fetches_one_chunk_near_it) {
  BackFetchMeeting m(20, 8);
  EXPECT_EQ(m.batch_at(19, 2), 2u);
  EXPECT_EQ(m.batch_at(5, 2), 2u) << "chunks 0-5 are 3 batches of 2 above a front at 0";
  EXPECT_EQ(m.batch_at(4, 2), 1u);
  EXPECT_TRUE(m.claim(10));
  EXPECT_EQ(m.batch_at(19, 2), 2u);
  EXPECT_EQ(m.batch_at(16, 2), 2u);
  EXPECT_EQ(m.batch_at(15, 2), 1u) << "the front holds 0-10: chunks 11-15 are under 3 batches";
  EXPECT_EQ(m.batch_at(19, 1), 1u);
}

TEST(back_fetch_meeting_claims, the_fetch_fetches_one_chunk_near_where_another_rank_s_run_ended) {
  BackFetchMeeting m(20, 8);
  m.keep_above(12, "rank 1's run ended at chunk 12");
  EXPECT_EQ(m.batch_at(19, 2), 2u) << "chunks 12-19 are 4 batches of 2";
  EXPECT_EQ(m.batch_at(17, 2), 2u);
  EXPECT_EQ(m.batch_at(16, 2), 1u) << "chunks 12-16 are under 3 batches above the other rank's floor";
  EXPECT_TRUE(m.claim(15));
  EXPECT_EQ(m.batch_at(19, 2), 1u) << "the front, above the floor, is the nearer now";
}

TEST_F(back_fetch_meeting, a_front_and_a_fetcher_on_its_own_thread_fill_the_prefix_bit_for_bit) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  BackFetchMeeting m(5, 8);
  std::thread fetcher([&] { fetch_back_into(r, prompt, 40, m); });
  dst.create(2);
  // The front's first chunk lasts until the fetcher holds chunks 4 down to 2.
  const MetPrefix met = meet_back_fetch(
      m,
      [&](size_t f) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (f == 0 && !m.holds(2) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        copy_chunk(2, f);
      },
      dst, 2, /*wait_for_run=*/true);
  fetcher.join();
  EXPECT_GE(met.front_chunks, 1u);
  EXPECT_GE(met.fetched_chunks, 3u) << "the fetcher took the back";
  EXPECT_EQ(met.cached_chunks(), 5u);
  EXPECT_EQ(met.publish_from, 5u) << "the store held every chunk";
  EXPECT_TRUE(met.publish_known);
  EXPECT_EQ(met.run.stop_reason, "");
  EXPECT_GT(met.run.bytes, 0u);
  expect_prefix(2, 40);
}

// Chunks 4, 3 and 2 of the store, as a fetch from the back hands them over.
std::vector<std::pair<std::string, size_t>> back_values(RemoteTier& r, const std::vector<int32_t>& prompt) {
  std::vector<std::pair<std::string, size_t>> values;
  (void)r.fetch_back(prompt, 40, [&](size_t c, std::string&& v, size_t offset) {
    values.emplace_back(std::move(v), offset);
    return c > 2;
  });
  return values;
}

TEST_F(back_fetch_meeting, a_back_fetch_hands_over_the_same_chunks_at_any_window_and_counts_the_bytes_a_stop_wasted) {
  RemoteTierConfig cfg = test::remote_cfg(server.url());
  RemoteTier publisher(cfg, test::small_kv(), 99);
  ASSERT_EQ(publisher.publish(prompt, 0, src, 1), 5u);
  publisher.flush();
  std::vector<std::vector<std::string>> seen;
  std::vector<RemoteBackFetch> runs;
  for (const size_t window : {size_t(1), size_t(2), size_t(7)}) {
    cfg.back_fetch_window = window;
    RemoteTier r(cfg, test::small_kv(), 99);
    std::vector<std::string> values;
    size_t value_bytes = 0;
    runs.push_back(r.fetch_back(prompt, 40, [&](size_t c, std::string&& v, size_t) {
      value_bytes = v.size();
      values.push_back(std::to_string(c) + ":" + v);
      return c > 2;  // the front has chunks 0-2
    }));
    seen.push_back(values);
    const RemoteBackFetch& run = runs.back();
    EXPECT_EQ(run.first, 3u) << "window " << window;
    EXPECT_EQ(run.end, 5u);
    EXPECT_EQ(run.failed_at, 5u);
    EXPECT_EQ(run.stop_reason, "");
    // Chunks 4, 3 and 2 came (2 refused); a window of 2 brought 1 with 2, 7 all five.
    const size_t came = window == 1 ? 3 : window == 2 ? 4 : 5;
    EXPECT_EQ(run.bytes, came * value_bytes) << "window " << window;
  }
  EXPECT_EQ(seen[1], seen[0]);
  EXPECT_EQ(seen[2], seen[0]);
  ASSERT_EQ(seen[0].size(), 3u);
}

TEST_F(back_fetch_meeting, the_front_joins_what_the_fetcher_took_without_waiting_for_the_chunk_in_flight) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  std::vector<std::pair<std::string, size_t>> values = back_values(r, prompt);
  ASSERT_EQ(values.size(), 3u);
  // This test is the fetcher: it holds chunks 4 and 3 before the front binds the
  // meeting, and its GET of chunk 2 never ends (nothing is delivered).
  BackFetchMeeting m(5, 8);
  ASSERT_TRUE(m.begin(r.layout()));
  ASSERT_TRUE(m.take(4, std::move(values[0].first), values[0].second));
  ASSERT_TRUE(m.take(3, std::move(values[1].first), values[1].second));
  EXPECT_GT(m.held_bytes(), 0u);
  dst.create(3);
  const MetPrefix met = meet_back_fetch(
      m,
      [&](size_t f) {
        if (f == 0) {  // bound: the chunks held went into the entry, above the front
          EXPECT_EQ(m.held_bytes(), 0u);
          EXPECT_EQ(dst.ahead(3), (std::pair<size_t, size_t>{24, 40}));
        }
        copy_chunk(3, f);
      },
      dst, 3, /*wait_for_run=*/false);
  EXPECT_EQ(met.front_chunks, 3u);
  EXPECT_EQ(met.fetched_chunks, 2u);
  EXPECT_EQ(met.publish_from, 5u) << "the fetch counted 5 chunks in the store before its first";
  EXPECT_TRUE(met.publish_known);
  EXPECT_GT(met.run.bytes, 0u);
  EXPECT_EQ(dst.ahead(3), (std::pair<size_t, size_t>{0, 0})) << "joined";
  expect_prefix(3, 40);
}

TEST_F(back_fetch_meeting, once_bound_a_taken_chunk_goes_straight_into_the_entry_and_nothing_waits_in_memory) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  std::vector<std::pair<std::string, size_t>> values = back_values(r, prompt);
  ASSERT_EQ(values.size(), 3u);
  BackFetchMeeting m(5, 8);
  ASSERT_TRUE(m.begin(r.layout()));
  dst.create(4);
  const MetPrefix met = meet_back_fetch(
      m,
      [&](size_t f) {
        if (f == 0) {  // the fetcher's chunks 4 and 3 arrive during the front's first
          ASSERT_TRUE(m.take(4, std::move(values[0].first), values[0].second));
          EXPECT_EQ(dst.ahead(4), (std::pair<size_t, size_t>{32, 40}));
          ASSERT_TRUE(m.take(3, std::move(values[1].first), values[1].second));
          EXPECT_EQ(dst.ahead(4), (std::pair<size_t, size_t>{24, 40}));
          EXPECT_EQ(m.held_bytes(), 0u);
          EXPECT_EQ(dst.bytes_held(4), 40 * dst.bytes_per_token());
        }
        copy_chunk(4, f);
      },
      dst, 4, /*wait_for_run=*/false);
  EXPECT_EQ(met.front_chunks, 3u);
  EXPECT_EQ(met.fetched_chunks, 2u);
  expect_prefix(4, 40);
}

TEST_F(back_fetch_meeting, before_the_front_binds_it_a_fetch_holds_no_more_than_its_limit) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  std::vector<std::pair<std::string, size_t>> values = back_values(r, prompt);
  ASSERT_EQ(values.size(), 3u);
  // Room for one chunk; the front never binds within the 50 ms wait.
  BackFetchMeeting m(5, 8, /*hold_limit=*/values[0].first.size() + 10, std::chrono::milliseconds(50));
  ASSERT_TRUE(m.begin(r.layout()));
  ASSERT_TRUE(m.take(4, std::move(values[0].first), values[0].second));
  EXPECT_FALSE(m.take(3, std::move(values[1].first), values[1].second)) << "past the limit, unbound";
  EXPECT_NE(m.refusal().find("would pass the"), std::string::npos) << m.refusal();
  EXPECT_NE(m.refusal().find("within 50 ms"), std::string::npos) << m.refusal();
  m.deliver(RemoteBackFetch{});
  ASSERT_NE(m.delivered(), nullptr);
  EXPECT_EQ(m.delivered()->stop_reason, m.refusal()) << "the run says why it ended";
  dst.create(5);
  const MetPrefix met = meet_back_fetch(m, [&](size_t f) { copy_chunk(5, f); }, dst, 5, /*wait_for_run=*/false);
  EXPECT_EQ(met.front_chunks, 4u) << "the front computed what the fetch did not bring";
  EXPECT_EQ(met.fetched_chunks, 1u);
  expect_prefix(5, 40);
}

TEST_F(back_fetch_meeting, a_fetch_whose_hold_is_full_waits_for_the_bind_and_goes_on_into_the_entry) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  std::vector<std::pair<std::string, size_t>> values = back_values(r, prompt);
  ASSERT_EQ(values.size(), 3u);
  const size_t one = values[0].first.size();
  BackFetchMeeting m(5, 8, /*hold_limit=*/one + 10, std::chrono::seconds(60));
  ASSERT_TRUE(m.begin(r.layout()));
  ASSERT_TRUE(m.take(4, std::move(values[0].first), values[0].second));
  std::atomic<bool> took3{false};
  std::thread fetcher([&] { took3 = m.take(3, std::move(values[1].first), values[1].second); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(m.holds(3)) << "still waiting for the bind";
  EXPECT_EQ(m.held_bytes(), one) << "the chunk that waits is not held";
  dst.create(16);
  const MetPrefix met = meet_back_fetch(
      m,
      [&](size_t f) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (f == 0 && !m.holds(3) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        copy_chunk(16, f);
      },
      dst, 16, /*wait_for_run=*/false);
  fetcher.join();
  EXPECT_TRUE(took3) << "the bind let the waiting chunk in";
  EXPECT_EQ(m.held_bytes(), 0u);
  EXPECT_EQ(met.front_chunks, 3u);
  EXPECT_EQ(met.fetched_chunks, 2u);
  expect_prefix(16, 40);
}

TEST_F(back_fetch_meeting, a_fetcher_that_never_started_costs_the_front_nothing_and_then_fetches_nothing) {
  BackFetchMeeting m(5, 8);
  dst.create(14);
  const MetPrefix met = meet_back_fetch(m, [&](size_t f) { copy_chunk(14, f); }, dst, 14, /*wait_for_run=*/false);
  EXPECT_EQ(met.front_chunks, 5u);
  EXPECT_EQ(met.fetched_chunks, 0u);
  EXPECT_FALSE(met.publish_known) << "what the store holds is unknown";
  EXPECT_NE(met.run.stop_reason.find("not in"), std::string::npos) << met.run.stop_reason;
  expect_prefix(14, 40);
  // The fetch starts late: it sees the front done and asks the store nothing.
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  fetch_back_into(r, prompt, 40, m);
  ASSERT_NE(m.delivered(), nullptr);
  EXPECT_EQ(m.delivered()->bytes, 0u);
  EXPECT_NE(m.delivered()->stop_reason.find("before the fetch started"), std::string::npos)
      << m.delivered()->stop_reason;
}

TEST_F(back_fetch_meeting, a_front_that_throws_stops_the_fetcher) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  BackFetchMeeting m(5, 8);
  dst.create(15);
  EXPECT_THROW((void)meet_back_fetch(m, [](size_t) { throw std::runtime_error("prefill failed"); }, dst, 15, false),
               std::runtime_error);
  fetch_back_into(r, prompt, 40, m);
  ASSERT_NE(m.delivered(), nullptr);
  EXPECT_EQ(m.delivered()->bytes, 0u) << "nothing wanted after the front stopped";
}

// Two ranks' agreement for the test: each votes, both read both votes.
struct TwoRanks {
  std::barrier<> sync{2};
  size_t votes[2] = {0, 0};
  size_t agree(int rank, size_t mine, bool minimum) {
    votes[rank] = mine;
    sync.arrive_and_wait();
    const size_t out = minimum ? std::min(votes[0], votes[1]) : std::max(votes[0], votes[1]);
    sync.arrive_and_wait();
    return out;
  }
  MeetingRanks of(int rank) {
    return {[this, rank](bool mine) { return agree(rank, mine ? 1 : 0, false) > 0; },
            [this, rank](size_t mine) { return agree(rank, mine, true); }};
  }
};

TEST_F(back_fetch_meeting, two_ranks_whose_fetches_hold_different_runs_keep_the_chunks_both_hold) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  ASSERT_EQ(r.publish(prompt, 0, src, 1), 5u);
  r.flush();
  const std::vector<std::pair<std::string, size_t>> values = back_values(r, prompt);  // chunks 4, 3, 2
  ASSERT_EQ(values.size(), 3u);
  // Rank 0 holds chunks [2, 5); rank 1's store lacks chunk 4 and its GET of chunk 2
  // is in flight, so it holds [3, 4). The fronts go on while either lacks the next
  // chunk (rank 0 prefills chunk 2 over its own run), then both keep [3, 4): the
  // chunks both hold.
  BackFetchMeeting m0(5, 8), m1(5, 8);
  ASSERT_TRUE(m0.begin(r.layout()));
  ASSERT_TRUE(m1.begin(r.layout()));
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(m0.take(4 - i, std::string(values[i].first), values[i].second));
  ASSERT_TRUE(m1.take(3, std::string(values[1].first), values[1].second));
  HostFullTier dst1{test::small_kv()};
  dst.create(6);
  dst1.create(6);
  TwoRanks group;
  MetPrefix met[2];
  std::thread rank1([&] {
    const MeetingRanks ranks = group.of(1);
    met[1] = meet_back_fetch(
        m1,
        [&](size_t f) {
          std::vector<std::byte> k(src.staging_bytes(8)), v(k.size());
          for (size_t l = 0; l < 2; ++l) {
            static_cast<FullTier&>(src).read_blocks(1, l, f * 2, 2, k.data(), v.data());
            static_cast<FullTier&>(dst1).write_blocks(6, l, f * 2, 2, k.data(), v.data());
          }
        },
        dst1, 6, /*wait_for_run=*/false, &ranks);
  });
  const MeetingRanks ranks0 = group.of(0);
  met[0] = meet_back_fetch(m0, [&](size_t f) { copy_chunk(6, f); }, dst, 6, /*wait_for_run=*/false, &ranks0);
  rank1.join();
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE("rank " + std::to_string(k));
    EXPECT_EQ(met[k].front_chunks, 3u);
    EXPECT_EQ(met[k].fetched_chunks, 1u) << "chunk 4 only rank 0 holds";
    EXPECT_EQ(met[k].publish_from, 4u) << "rank 1's store ends at chunk 4";
    EXPECT_TRUE(met[k].publish_known);
  }
  expect_prefix(6, 32);
  ASSERT_EQ(dst1.length(6), 32u);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst1, 6, l, 32), layer_bytes(src, 1, l, 32)) << "layer " << l;
}

}  // namespace
}  // namespace vc

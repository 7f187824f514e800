// The net_fetcher actor against a real redis-server, driven by a caf::scoped_actor:
// a prefix published through it comes back through it bit for bit; with the store
// gone a fetch answers an empty prefix and its reason instead of an error; in a
// tensor-parallel group, a rank whose back fetch takes no chunk stops the others'.
#include <gtest/gtest.h>

#include <random>

#include <caf/all.hpp>

#include "actors/net_fetcher.hpp"
#include "actors/protocol.hpp"
#include "kvtiers/full_tier.hpp"
#include "tests/actors/kivi_view.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/kvtiers/remote_tier_support.hpp"
#include "tests/kvtiers/tcp_proxy.hpp"

namespace vc::actors {
namespace {

using test::small_kv;

TEST(net_fetcher, fetches_back_what_it_published_in_segments_and_reports_a_dead_store_as_a_miss) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  HostFullTier tier(small_kv());
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 % 13);
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> k(16), v(16);
  tier.create(1);
  for (size_t p = 0; p < prompt.size(); ++p)
    for (size_t l = 0; l < 2; ++l) {
      for (float& x : k) x = d(rng);
      for (float& x : v) x = d(rng);
      tier.write(1, l, p, k.data(), v.data());
    }
  RemoteTierConfig rc;
  rc.url = server.url();
  rc.chunk_tokens = 8;
  auto remote = std::make_shared<RemoteTier>(rc, small_kv(), 5);

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  {
    caf::scoped_actor self{sys};
    auto fetcher = sys.spawn<caf::detached>(net_fetcher, remote);
    const auto timeout = std::chrono::seconds(10);
    self->request(fetcher, timeout, remote_publish_msg{1, prompt, 0, &tier, {}, ""})
        .receive([](const remote_published_msg& m) {
                   EXPECT_EQ(m.chunks, 2u);
                   EXPECT_EQ(m.compressed_chunks, 0u) << "no view was sent";
                 },
                 [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    remote->flush();
    tier.create(2);
    // In two segments: the second appends from where the first ended.
    self->request(fetcher, timeout, remote_fetch_msg{2, prompt, 0, 8, &tier})
        .receive([](const remote_fetched_msg& m) {
                   EXPECT_EQ(m.id, 2u);
                   EXPECT_EQ(m.fetch.chunks, 1u) << m.fetch.stop_reason;
                   EXPECT_EQ(m.fetch.positions, 8u);
                 },
                 [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    self->request(fetcher, timeout, remote_fetch_msg{2, prompt, 8, prompt.size() - 1, &tier})
        .receive([](const remote_fetched_msg& m) {
                   EXPECT_EQ(m.fetch.chunks, 1u) << m.fetch.stop_reason;
                   EXPECT_EQ(m.fetch.positions, 16u);
                   EXPECT_EQ(m.fetch.stop_reason, "");
                 },
                 [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    // A segment from where the entry does not end is refused, naming both.
    self->request(fetcher, timeout, remote_fetch_msg{2, prompt, 8, prompt.size() - 1, &tier})
        .receive([](const remote_fetched_msg& m) {
                   EXPECT_NE(m.error.find("a fetch from position 8 into request 2, which holds 16"),
                             std::string::npos)
                       << m.error;
                 },
                 [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    std::vector<std::byte> a(tier.staging_bytes(16)), b(a.size()), a2(a.size()), b2(a.size());
    tier.read_layer(1, 1, 16, a.data(), b.data());
    tier.read_layer(2, 1, 16, a2.data(), b2.data());
    EXPECT_EQ(a, a2);
    EXPECT_EQ(b, b2);

    server.kill();
    tier.create(3);
    self->request(fetcher, timeout, remote_fetch_msg{3, prompt, 0, prompt.size() - 1, &tier})
        .receive([](const remote_fetched_msg& m) {
                   EXPECT_EQ(m.fetch.chunks, 0u);
                   // Its pooled connections were open: the store's end closed them.
                   EXPECT_NE(m.fetch.stop_reason.find("remote store redis://127.0.0.1:"), std::string::npos)
                       << m.fetch.stop_reason;
                 },
                 [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    self->send_exit(fetcher, caf::exit_reason::user_shutdown);
  }
}


TEST(net_fetcher, a_group_rank_whose_back_fetch_takes_no_chunk_stops_the_other_ranks_fetch) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  HostFullTier tier(small_kv());
  const std::vector<int32_t> prompt = test::tokens(44);  // 5 whole chunks of 8
  test::fill(tier, 1, prompt.size());
  RemoteTierConfig rc0 = test::remote_cfg(server.url()), rc1 = rc0;
  rc0.tp_degree = rc1.tp_degree = 2;
  rc1.tp_rank = 1;
  {  // the store holds rank 0's chunks, none of rank 1's
    RemoteTier publisher(rc0, small_kv(), 5);
    ASSERT_EQ(publisher.publish(prompt, 0, tier, 1), 5u);
    publisher.flush();
  }
  // Rank 0 reaches the store through a proxy that delays each reply 300 ms: its
  // first chunk comes long after rank 1's count found none.
  test::TcpProxy slow(server.port(), {.reply_delay = std::chrono::milliseconds(300)});
  rc0.url = slow.url();
  std::vector<std::shared_ptr<RemoteTier>> remotes = {std::make_shared<RemoteTier>(rc0, small_kv(), 5),
                                                      std::make_shared<RemoteTier>(rc1, small_kv(), 5)};
  RankMeetings meetings = {std::make_shared<BackFetchMeeting>(5, 8), std::make_shared<BackFetchMeeting>(5, 8)};
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  {
    caf::scoped_actor self{sys};
    auto fetcher = sys.spawn<caf::detached>(net_fetcher_group, remotes, std::vector<FullTier*>{&tier, &tier});
    self->request(fetcher, std::chrono::seconds(30), remote_fetch_back_msg{2, prompt, 40, meetings})
        .receive([](bool) {}, [](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    self->send_exit(fetcher, caf::exit_reason::user_shutdown);
  }
  const RemoteBackFetch* run0 = meetings[0]->delivered();
  const RemoteBackFetch* run1 = meetings[1]->delivered();
  ASSERT_NE(run0, nullptr);
  ASSERT_NE(run1, nullptr);
  EXPECT_EQ(run1->end, 0u) << "rank 1's store holds none of its chunks";
  EXPECT_EQ(run0->end, 5u) << "rank 0's holds all five";
  EXPECT_EQ(run0->first, run0->end) << "rank 0 took none: the group could keep none";
  EXPECT_NE(run0->stop_reason.find("tensor-parallel rank 1's run took no chunk"), std::string::npos)
      << run0->stop_reason;
  EXPECT_EQ(meetings[0]->held_bytes(), 0u);
}

// Positions [a, b) of `v`.
std::shared_ptr<const CompressedView> slice_of(const CompressedView& v, size_t a, size_t b) {
  std::string why;
  auto s = v.slice(a, b, why);
  EXPECT_TRUE(s) << why;
  return std::make_shared<const CompressedView>(std::move(*s));
}

TEST(net_fetcher, join_segment_joins_a_segment_onto_the_views_before_bit_for_bit) {
  const auto whole = test::kivi_view(64);
  RemoteCompressedFetch f;
  f.chunks = 2;
  f.positions = 64;
  const RankViews first = join_segment({}, {slice_of(*whole, 0, 32)}, f);
  ASSERT_EQ(1u, first.size());
  EXPECT_EQ(32u, first[0]->covered()) << "the first segment as fetched";
  const RankViews joined = join_segment(first, {slice_of(*whole, 32, 64)}, f);
  ASSERT_EQ(1u, joined.size());
  EXPECT_EQ(whole->serialize(), joined[0]->serialize());
  EXPECT_EQ(2u, f.chunks);
  EXPECT_EQ("", f.stop_reason);
}

TEST(net_fetcher, join_segment_keeps_the_views_before_when_the_segment_cannot_be_used) {
  const auto whole = test::kivi_view(64);
  const RankViews base = {slice_of(*whole, 0, 32)};
  RemoteCompressedFetch f;  // a piece at the wrong position
  f.chunks = 1;
  f.positions = 48;
  RankViews got = join_segment(base, {slice_of(*whole, 0, 16)}, f);
  EXPECT_EQ(base, got);
  EXPECT_EQ(0u, f.chunks);
  EXPECT_EQ(32u, f.positions);
  EXPECT_NE(f.stop_reason.find("the compressed chunks from 32 not joined: a piece starting at position 0"),
            std::string::npos)
      << f.stop_reason;
  f = RemoteCompressedFetch{};  // the ranks disagreed: chunks but no views
  f.chunks = 2;
  f.stop_reason = "the tensor-parallel ranks' compressed prefixes differ";
  got = join_segment(base, {}, f);
  EXPECT_EQ(base, got);
  EXPECT_EQ(0u, f.chunks);
  EXPECT_EQ("the tensor-parallel ranks' compressed prefixes differ", f.stop_reason);
  f = RemoteCompressedFetch{};
  f.chunks = 1;
  got = join_segment(base, {slice_of(*whole, 32, 48), slice_of(*whole, 32, 48)}, f);
  EXPECT_EQ(base, got);
  EXPECT_NE(f.stop_reason.find("another tensor-parallel degree"), std::string::npos) << f.stop_reason;
}

}  // namespace
}  // namespace vc::actors

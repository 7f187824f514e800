// SchedulerCore with the remote prefix cache and recompute front, without an actor
// system: the back fetch is asked for and the prefill (which makes the entry) goes
// out at once (nothing waits for the store); the prefill's account of the meeting
// sets the stats and where publishing starts (past what the store holds when it
// could not say); the entry is released through the drafter, after the prefill
// that made it; a finished request stops its fetch; a compressed-first miss falls
// back to the meeting.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_core_remote_support.hpp"

namespace vc::actors {
namespace {

Submitted front_request(uint64_t id, size_t prompt, size_t max_tokens, size_t limit) {
  Submitted s = remote_request(id, prompt, max_tokens, DecodeMode::vericache, limit);
  s.ctx->recompute_front = true;
  return s;
}

PrefillResult met_prefill(uint64_t id, size_t front, size_t fetched, size_t publish_from, bool known = true) {
  PrefillResult r = prefilled(id, 7);
  MetPrefix m;
  m.front_chunks = front;
  m.fetched_chunks = fetched;
  m.publish_from = publish_from;
  m.publish_known = known;
  m.run.bytes = fetched * 1000;
  m.run.seconds = 0.25;
  m.run.stop_reason = "";
  r.met = m;
  return r;
}

TEST(scheduler_core_recompute_front, the_back_fetch_and_the_prefill_start_together_over_an_entry_made_first) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 90, 1, 69);
  core.submit(a.ctx);
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(calls));
  EXPECT_EQ(64u, calls[0].n) << "whole chunks within the limit of 69";
  ASSERT_EQ(calls[0].meetings.size(), 1u) << "one rank";
  EXPECT_EQ(4u, calls[0].meetings[0]->chunks());
  EXPECT_EQ(kChunk, calls[0].meetings[0]->chunk_tokens());
  EXPECT_EQ(calls[0].meetings, calls[1].spec.remote_meetings) << "the drafter meets the same fetch";
  EXPECT_TRUE(calls[1].spec.tier_ready) << "the drafter makes the entry for the scheduler";
  EXPECT_EQ(0u, calls[1].spec.remote_cached);

  // The drafter prefilled chunk 0, the store gave chunks 1..3; it lacked none of
  // them, so publishing starts past the prefix (chunk 4, prefilled after it).
  core.on_prefilled(met_prefill(1, 1, 3, 4));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::publish, Call::release}), kinds(calls));
  EXPECT_EQ(4u, calls[0].n);
  EXPECT_FALSE(calls[0].ahead) << "the store's holdings are known";
  EXPECT_FALSE(calls[1].full_tier) << "the scheduler frees the entry";
  core.on_remote_published(1, 0);
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::release_tier}), kinds(calls));
  EXPECT_TRUE(calls[0].ahead) << "through the drafter, after the prefill that made it";
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.stats.remote_recompute_front);
  EXPECT_EQ(16u, r.stats.remote_front_recomputed);
  EXPECT_EQ(3u, r.stats.remote_chunks_hit);
  EXPECT_EQ(48u, r.stats.remote_positions);
  EXPECT_EQ(3000u, r.stats.remote_bytes_fetched);
  EXPECT_DOUBLE_EQ(0.25, r.stats.remote_fetch_seconds);
}

TEST(scheduler_core_recompute_front, when_idle_only_a_request_alone_in_the_engine_recomputes_its_front) {
  FakeOutbox out;
  SchedulerCore core(out, 3, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto when_idle = [](uint64_t id) {
    Submitted s = front_request(id, 90, 1, 69);
    s.ctx->recompute_front_when_idle = true;
    return s;
  };
  auto a = when_idle(1);
  core.submit(a.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(out.take())) << "alone: front and back";
  auto b = when_idle(2);
  core.submit(b.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take())) << "beside request 1: fetch, then prefill";
  auto c = front_request(3, 90, 1, 69);  // recompute front always
  core.submit(c.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(out.take())) << "its own setting";
  core.on_prefilled(met_prefill(1, 1, 3, 4));
  out.take();
  core.on_remote_published(1, 0);
  out.take();
  ASSERT_TRUE(ready(a.result));
  EXPECT_TRUE(a.result.get().stats.remote_recompute_front);
}

TEST(scheduler_core_recompute_front, priced_beside_others_it_recomputes_only_once_the_link_proves_slow_enough) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto priced = [](uint64_t id) {
    Submitted s = front_request(id, 90, 1, 69);
    s.ctx->recompute_front_priced = true;
    return s;
  };
  // A plain request's whole prefill: `seconds` for its 90 positions.
  auto local_prefill = [&](uint64_t id, double seconds) {
    auto p = make_request(id, 90, 1, 4, DecodeMode::vericache);
    core.submit(p.ctx);
    out.take();
    PrefillResult r = prefilled(id, 7);
    r.seconds = seconds;
    core.on_prefilled(r);
    out.take();
  };
  auto a = priced(1);
  core.submit(a.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(out.take())) << "alone: front and back";
  // Beside request 1, nothing measured yet: the plain flow. Its fetch: 64 positions
  // in 0.64 s (10 ms each). Its prefill of the suffix after the fetch is no sample
  // (it also compresses the whole prompt).
  auto b = priced(2);
  core.submit(b.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take()));
  RemoteFetch f = hit(4);
  f.seconds = 0.64;
  core.on_remote_fetched(2, f, "");
  EXPECT_EQ((std::vector<Call::Kind>{Call::prefill}), kinds(out.take()));
  PrefillResult p2 = prefilled(2, 7);
  p2.seconds = 0.001;
  core.on_prefilled(p2);
  out.take();
  local_prefill(4, 0.9);  // 10 ms a position: fetching is not slower
  auto c = priced(3);
  core.submit(c.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take())) << "10 ms vs 10 ms: fetch";
  RemoteFetch g = hit(4);
  g.seconds = 0.64;
  core.on_remote_fetched(3, g, "");
  out.take();
  PrefillResult p3 = prefilled(3, 7);
  p3.seconds = 0.001;
  core.on_prefilled(p3);
  out.take();
  local_prefill(6, 0.09);  // now 0.99 s over 180 positions (5.5 ms each), 10 ms fetched
  // Requests 2, 3, 4 and 6 are done (one token each): one other (request 1) beside
  // the next. 10 ms > 1 x 5.5 ms: recompute.
  auto e = priced(5);
  core.submit(e.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(out.take()));
  core.on_prefilled(met_prefill(1, 1, 3, 4));
  out.take();
  for (uint64_t id : {1, 2, 3}) core.on_remote_published(id, 0);
  out.take();
  ASSERT_TRUE(ready(a.result));
  EXPECT_NE(a.result.get().stats.remote_front_price.find("alone"), std::string::npos);
  ASSERT_TRUE(ready(b.result));
  EXPECT_NE(b.result.get().stats.remote_front_price.find("no fetch measured yet"), std::string::npos);
  ASSERT_TRUE(ready(c.result));
  const auto third = c.result.get();
  const std::string& why = third.stats.remote_front_price;
  EXPECT_NE(why.find("beside 1 other"), std::string::npos) << why;
  EXPECT_NE(why.find("10 ms to fetch, 10 ms to prefill"), std::string::npos) << why;
  EXPECT_NE(why.find("fetch <= others x prefill"), std::string::npos) << why;
  EXPECT_FALSE(third.stats.remote_recompute_front);
}

TEST(scheduler_core_recompute_front, priced_alone_with_a_prefix_shorter_than_a_chunk_fetches_and_says_so) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  Submitted s = front_request(1, 90, 1, kChunk - 1);
  s.ctx->recompute_front_priced = true;
  core.submit(s.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take()));
  core.on_remote_fetched(1, RemoteFetch{}, "");  // nothing cached
  out.take();
  core.on_prefilled(prefilled(1, 7));
  out.take();
  core.on_remote_published(1, 0);
  out.take();
  ASSERT_TRUE(ready(s.result));
  EXPECT_EQ(s.result.get().stats.remote_front_price, "the prefix is shorter than a chunk: fetch");
}

TEST(scheduler_core_recompute_front, chunks_the_front_computed_past_what_the_store_held_are_published) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 70, 1, 69);
  core.submit(a.ctx);
  out.take();
  core.on_prefilled(met_prefill(1, 4, 0, 2));  // the store held 2 chunks; the front took 4
  const auto calls = out.take();
  ASSERT_EQ(1u, ids_of(calls, Call::publish).size());
  EXPECT_EQ(2u, calls[0].n) << "from the first chunk the store lacked, not from the 4 in the tier";
}

TEST(scheduler_core_recompute_front, a_store_not_heard_from_has_its_held_chunks_skipped_when_publishing) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 70, 1, 69);
  core.submit(a.ctx);
  out.take();
  core.on_prefilled(met_prefill(1, 4, 0, 0, /*known=*/false));
  const auto calls = out.take();
  ASSERT_EQ(1u, ids_of(calls, Call::publish).size());
  EXPECT_EQ(0u, calls[0].n);
  EXPECT_TRUE(calls[0].ahead) << "skip_held: the net_fetcher counts what the store holds";
}

TEST(scheduler_core_recompute_front, a_failed_prefill_fails_the_request_stops_its_fetch_and_frees_through_the_drafter) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 70, 4, 69);
  core.submit(a.ctx);
  const auto meeting = out.take()[0].meetings.at(0);
  core.on_failed(1, "full tier: out of room");
  const auto calls = out.take();
  ASSERT_EQ((std::vector<uint64_t>{1}), ids_of(calls, Call::release_tier));
  for (const Call& c : calls)
    if (c.kind == Call::release_tier) {
      EXPECT_TRUE(c.ahead);
    }
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(std::string::npos, r.error.find("full tier: out of room")) << r.error;
  EXPECT_FALSE(meeting->begin(ChunkLayout{})) << "its fetch takes nothing";
}

TEST(scheduler_core_recompute_front, a_prefix_shorter_than_a_chunk_is_fetched_as_before) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 12, 2, 11);
  core.submit(a.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take()));
}

TEST(scheduler_core_recompute_front, cancelling_during_the_prefill_frees_the_entry_at_once) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 70, 4, 69);
  core.submit(a.ctx);
  const auto meeting = out.take()[0].meetings.at(0);
  core.cancel(1);
  const auto calls = out.take();
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(calls, Call::release_tier));
  for (const Call& c : calls)
    if (c.kind == Call::release_tier) {
      EXPECT_TRUE(c.ahead) << "after the drafter's prefill, which makes it";
    }
  ASSERT_TRUE(ready(a.result));
  EXPECT_EQ("cancelled", a.result.get().finish_reason);
  EXPECT_FALSE(meeting->begin(ChunkLayout{})) << "its fetch takes nothing";
  core.on_prefilled(met_prefill(1, 4, 0, 0));  // the drafter's late answer
  EXPECT_TRUE(out.take().empty());
}

TEST(scheduler_core_recompute_front, a_compressed_first_miss_takes_the_meeting) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = front_request(1, 70, 4, 69);
  a.ctx->compressed_first = true;
  a.ctx->view_spec = "snapkv:4";
  core.submit(a.ctx);
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch_compressed}), kinds(out.take()));
  core.on_remote_compressed_fetched(1, {}, RemoteCompressedFetch{});
  EXPECT_EQ((std::vector<Call::Kind>{Call::meet, Call::prefill}), kinds(out.take()));
}

}  // namespace
}  // namespace vc::actors

// SchedulerCore with the remote prefix cache, without an actor system: the fetch
// comes before prefill and sets where prefill starts; the publish comes after
// prefill; the full-tier entry is freed only once neither the fetch nor the publish
// reads it, and a request's result waits for its publish count; a long prefix comes
// a segment at a time. (The
// compressed-first flow: scheduler_core_compressed_first_test.cpp.)
#include <gtest/gtest.h>

#include "tests/actors/scheduler_core_remote_support.hpp"

namespace vc::actors {
namespace {

TEST(scheduler_core_remote, a_request_fetches_its_prefix_before_prefill_and_prefills_from_its_end) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 70, 1, DecodeMode::vericache, 69);
  core.submit(a.ctx);
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::fetch, calls[0].kind);
  EXPECT_EQ(64u, calls[0].n) << "whole chunks within the limit of 69";
  EXPECT_EQ(0u, calls[0].from);
  EXPECT_EQ(71u, calls[0].create) << "room for the prompt and its tokens";
  core.on_remote_fetched(1, hit(2), "");
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  ASSERT_EQ(Call::prefill, calls[0].kind);
  EXPECT_TRUE(calls[0].spec.tier_ready);
  EXPECT_EQ(32u, calls[0].spec.remote_cached);

  core.on_prefilled(prefilled(1, 7));  // max_tokens 1: finished at once
  calls = out.take();
  ASSERT_EQ(2u, calls.size());
  EXPECT_EQ(Call::publish, calls[0].kind);
  EXPECT_EQ(2u, calls[0].n) << "the chunks after those the store had";
  EXPECT_EQ(Call::release, calls[1].kind);
  EXPECT_FALSE(calls[1].full_tier) << "the entry is still being published from";
  EXPECT_FALSE(ready(a.result)) << "the result waits for its publish count";

  core.on_remote_published(1, 2);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release_tier, calls[0].kind);
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.stats.remote);
  EXPECT_EQ(2u, r.stats.remote_chunks_hit);
  EXPECT_EQ(32u, r.stats.remote_positions);
  EXPECT_EQ(2000u, r.stats.remote_bytes_fetched);
  EXPECT_EQ(2u, r.stats.remote_chunks_published);
}

TEST(scheduler_core_remote, a_vericache_request_verifies_rounds_while_published_and_frees_its_entry_after_both) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 40, 4, DecodeMode::vericache, 39);
  core.submit(a.ctx);
  out.take();
  core.on_remote_fetched(1, hit(0), "");
  out.take();
  core.on_prefilled(prefilled(1, 7));
  EXPECT_EQ((std::vector<Call::Kind>{Call::publish, Call::draft}), kinds(out.take()));
  DraftBlock d = drafts(1, {5, 6});
  core.on_drafted(d);
  EXPECT_EQ((std::vector<Call::Kind>{Call::verify}), kinds(out.take()));
  core.on_verified(verified(1, {5, 6, 8}, 2));  // 4 tokens: done, the publish not yet
  auto calls = out.take();
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(calls));
  EXPECT_FALSE(calls[0].full_tier);
  EXPECT_FALSE(ready(a.result));
  core.on_remote_published(1, 2);
  EXPECT_EQ((std::vector<Call::Kind>{Call::release_tier}), kinds(out.take()));
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{7, 5, 6, 8}), r.output_ids);
  EXPECT_EQ(2u, r.stats.remote_chunks_published);
}

TEST(scheduler_core_remote, lossy_frees_its_entry_once_published_while_it_still_decodes) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 40, 10, DecodeMode::lossy, 39);
  core.submit(a.ctx);
  out.take();
  core.on_remote_fetched(1, hit(0), "");
  out.take();
  core.on_prefilled(prefilled(1, 7));
  auto calls = out.take();
  ASSERT_EQ(2u, calls.size());
  EXPECT_EQ(Call::publish, calls[0].kind);
  EXPECT_EQ(0u, calls[0].n);
  EXPECT_EQ(Call::draft, calls[1].kind);
  core.on_remote_published(1, 2);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release_tier, calls[0].kind);
  DraftBlock rest = final_block(1, std::vector<int32_t>(9, 5));
  core.on_drafted(rest);
  calls = out.take();
  EXPECT_EQ(0u, ids_of(calls, Call::release_tier).size()) << "freed once only";
  ASSERT_TRUE(ready(a.result));
  EXPECT_EQ(10u, a.result.get().output_ids.size());
}

TEST(scheduler_core_remote, a_fully_cached_prompt_publishes_nothing_and_frees_at_the_end) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 33, 1, DecodeMode::vericache, 32);
  core.submit(a.ctx);
  out.take();
  core.on_remote_fetched(1, hit(2), "");
  out.take();
  core.on_prefilled(prefilled(1, 7));
  const auto calls = out.take();
  EXPECT_EQ(0u, ids_of(calls, Call::publish).size());
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(calls, Call::release_tier));
  ASSERT_TRUE(ready(a.result));
}

TEST(scheduler_core_remote, the_prompts_view_is_published_with_its_compressor_spec_even_when_the_full_chunks_were_cached) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 33, 1, DecodeMode::vericache, 32);
  a.ctx->spec.compressor = "kivi";
  a.ctx->spec.ratio = 5.0;
  core.submit(a.ctx);
  out.take();
  core.on_remote_fetched(1, hit(2), "");
  out.take();
  PrefillResult p = prefilled(1, 7);
  p.views = {std::make_shared<const CompressedView>()};
  core.on_prefilled(p);
  auto calls = out.take();
  const auto publish = ids_of(calls, Call::publish);
  ASSERT_EQ((std::vector<uint64_t>{1}), publish);
  const Call& c = calls[0];
  ASSERT_EQ(Call::publish, c.kind);
  EXPECT_EQ(2u, c.n) << "no full chunk is left to publish";
  EXPECT_EQ(p.views, c.views);
  EXPECT_EQ(compressor_spec("kivi", {}, 5.0), c.view_spec);
  EXPECT_FALSE(ready(a.result)) << "the result waits for its publish count";
  core.on_remote_published(1, 0, 2);
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(out.take(), Call::release_tier));
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_EQ(0u, r.stats.remote_chunks_published);
  EXPECT_EQ(2u, r.stats.remote_compressed_chunks_published);
}

TEST(scheduler_core_remote, cancelling_during_the_fetch_frees_the_entry_when_the_fetch_answers) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 40, 10, DecodeMode::vericache, 39);
  auto b = make_request(2, 5, 10);
  core.submit(a.ctx);
  core.submit(b.ctx);
  out.take();
  core.cancel(1);
  ASSERT_TRUE(ready(a.result));
  EXPECT_EQ("cancelled", a.result.get().finish_reason);
  auto calls = out.take();
  EXPECT_EQ(0u, ids_of(calls, Call::release_tier).size()) << "the fetch still writes into it";
  EXPECT_EQ((std::vector<uint64_t>{2}), ids_of(calls, Call::prefill)) << "the next is admitted";
  core.on_remote_fetched(1, hit(1), "");
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release_tier, calls[0].kind);
  EXPECT_EQ(1u, calls[0].id);
}

TEST(scheduler_core_remote, a_fetch_that_could_not_make_the_entry_fails_the_request_naming_it) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = remote_request(1, 40, 10, DecodeMode::lossy, 39);
  core.submit(a.ctx);
  out.take();
  core.on_remote_fetched(1, RemoteFetch{}, "host full tier: out of budget");
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("remote prefix cache: host full tier: out of budget"), std::string::npos)
      << r.error;
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(out.take(), Call::release_tier));
}


// Segments (set_remote_fetch_segment): each from where the one before ended, the
// next asked for only when the last came back whole; the stats sum them.

// The net_fetcher's answer to a segment that began at chunk `from` and brought `got`.
RemoteFetch segment(size_t from, size_t got, std::string stop_reason = "") {
  RemoteFetch f;
  f.chunks = got;
  f.positions = (from + got) * kChunk;
  f.bytes_full = got * 1000;
  f.seconds = 0.25;
  f.stop_reason = std::move(stop_reason);
  return f;
}

// Request 1 (120 tokens: 7 whole chunks within its limit of 119) submitted to a
// core fetching `chunks` chunks at a time (0: whole); `first`: the calls it made.
struct Segmented {
  FakeOutbox out;
  SchedulerCore core;
  Submitted a;
  std::vector<Call> first;
  Segmented(size_t chunks, DecodeMode mode, size_t max_tokens) : core(out, 2, 4, false, nullptr) {
    core.set_remote_chunk_tokens(kChunk);
    core.set_remote_fetch_segment(chunks);
    a = remote_request(1, 120, max_tokens, mode, 119);
    core.submit(a.ctx);
    first = out.take();
  }
};

TEST(scheduler_core_remote_segments, a_long_prefix_is_fetched_in_segments_each_from_where_the_last_ended) {
  Segmented t(2, DecodeMode::vericache, 1);
  auto& [out, core, a, first] = t;
  const std::vector<std::pair<size_t, size_t>> expected = {{0, 32}, {32, 64}, {64, 96}, {96, 112}};
  for (size_t i = 0; i < expected.size(); ++i) {
    auto calls = i == 0 ? first : out.take();
    ASSERT_EQ(1u, calls.size()) << "segment " << i;
    ASSERT_EQ(Call::fetch, calls[0].kind) << "segment " << i;
    EXPECT_EQ(expected[i].first, calls[0].from) << "segment " << i;
    EXPECT_EQ(expected[i].second, calls[0].n) << "segment " << i;
    EXPECT_EQ(i == 0 ? 121u : 0u, calls[0].create) << "only the first segment creates the entry";
    const size_t from = expected[i].first / kChunk;
    core.on_remote_fetched(1, segment(from, expected[i].second / kChunk - from), "");
  }
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  ASSERT_EQ(Call::prefill, calls[0].kind);
  EXPECT_EQ(112u, calls[0].spec.remote_cached);
  core.on_prefilled(prefilled(1, 7));
  out.take();
  core.on_remote_published(1, 0);
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_EQ(7u, r.stats.remote_chunks_hit);
  EXPECT_EQ(112u, r.stats.remote_positions);
  EXPECT_EQ(7000u, r.stats.remote_bytes_fetched);
  EXPECT_EQ(4u, r.stats.remote_fetch_segments);
  EXPECT_DOUBLE_EQ(1.0, r.stats.remote_fetch_seconds);
}

TEST(scheduler_core_remote_segments, a_segment_that_comes_back_short_ends_the_fetch_with_its_reason) {
  Segmented t(2, DecodeMode::lossy, 1);
  auto& [out, core, a, first] = t;
  core.on_remote_fetched(1, segment(0, 2), "");
  out.take();
  core.on_remote_fetched(1, segment(2, 1, "chunk 3 not in the store"), "");
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  ASSERT_EQ(Call::prefill, calls[0].kind) << "no third segment after a short one";
  EXPECT_EQ(48u, calls[0].spec.remote_cached);
  core.on_prefilled(prefilled(1, 7));
  out.take();
  core.on_remote_published(1, 0);
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_EQ(3u, r.stats.remote_chunks_hit);
  EXPECT_EQ(2u, r.stats.remote_fetch_segments);
  EXPECT_EQ("chunk 3 not in the store", r.stats.remote_stop_reason);
}

TEST(scheduler_core_remote_segments, segment_zero_fetches_the_whole_prefix_at_once) {
  Segmented t(0, DecodeMode::vericache, 1);
  auto& [out, core, a, first] = t;
  ASSERT_EQ(1u, first.size());
  EXPECT_EQ(0u, first[0].from);
  EXPECT_EQ(112u, first[0].n);
  core.on_remote_fetched(1, segment(0, 7), "");
  EXPECT_EQ((std::vector<Call::Kind>{Call::prefill}), kinds(out.take()));
}

TEST(scheduler_core_remote_segments, cancelling_between_segments_asks_for_no_more_and_frees_the_entry) {
  Segmented t(2, DecodeMode::vericache, 10);
  auto& [out, core, a, first] = t;
  core.on_remote_fetched(1, segment(0, 2), "");
  EXPECT_EQ((std::vector<Call::Kind>{Call::fetch}), kinds(out.take()));
  core.cancel(1);
  EXPECT_EQ(0u, ids_of(out.take(), Call::release_tier).size()) << "the second segment still writes into it";
  core.on_remote_fetched(1, segment(2, 2), "");
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release_tier, calls[0].kind);
}

TEST(scheduler_core_remote_segments, a_tier_fault_in_a_later_segment_fails_the_request_and_frees_the_entry) {
  Segmented t(2, DecodeMode::vericache, 10);
  auto& [out, core, a, first] = t;
  core.on_remote_fetched(1, segment(0, 2), "");
  out.take();
  core.on_remote_fetched(1, RemoteFetch{}, "host full tier: out of budget");
  ASSERT_TRUE(ready(a.result));
  EXPECT_FALSE(a.result.get().ok);
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(out.take(), Call::release_tier));
}

}  // namespace
}  // namespace vc::actors

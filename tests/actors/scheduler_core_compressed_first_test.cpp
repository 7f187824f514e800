// SchedulerCore's compressed-first remote flow, without an actor system: the
// compressed chunks fetched first, drafting from the guess of the first token (and
// ahead of it) while the full chunks arrive, the exact first token deciding whether
// those drafts are verified; the full flow when the view does not fit; lossy mode
// over the fetched view; a cancel while drafting.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/actors/kivi_view.hpp"
#include "tests/actors/scheduler_core_remote_support.hpp"

namespace vc::actors {
namespace {

constexpr size_t kPrompt = 70;  // 4 chunks of 16; at most 69 positions fetched

Submitted compressed_first_request(uint64_t id, size_t max_tokens, DecodeMode mode) {
  Submitted s = remote_request(id, kPrompt, max_tokens, mode, 48);
  s.ctx->compressed_first = true;
  s.ctx->view_spec = "snapkv r4";
  s.ctx->cf_view_allowance = 1 << 20;
  s.ctx->cf_suffix_allowance = kChunk;
  return s;
}

// A view of positions [0, covered) (no rows: the scheduler reads its size alone).
std::shared_ptr<const CompressedView> fetched(size_t covered) {
  return std::make_shared<const CompressedView>(KvShape{2, 2, 8, covered}, QuantSpec{});
}

RemoteCompressedFetch compressed_hit(size_t chunks) {
  RemoteCompressedFetch f;
  f.chunks = chunks;
  f.positions = chunks * kChunk;
  f.bytes = chunks * 250;
  return f;
}

// Submits `a` and answers its compressed fetch with a view of 64 positions (4
// chunks); forgets the calls so far.
void admit_with_view(SchedulerCore& core, FakeOutbox& out, const Submitted& a) {
  core.submit(a.ctx);
  core.on_remote_compressed_fetched(a.ctx->id, {fetched(64)}, compressed_hit(4));
  out.take();
}

PrefillResult guess(uint64_t id, int32_t token) {
  PrefillResult r = prefilled(id, token);
  r.exact_pending = true;
  return r;
}

PrefillResult exact(uint64_t id, int32_t token, bool drafts_kept) {
  PrefillResult r = prefilled(id, token);
  r.drafts_kept = drafts_kept;
  return r;
}

TEST(scheduler_core_remote, compressed_first_drafts_from_the_guess_and_verifies_those_drafts_once_the_exact_token_agrees) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  core.submit(a.ctx);
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::fetch_compressed, calls[0].kind);
  EXPECT_EQ(0u, calls[0].from);
  EXPECT_EQ((kPrompt - 1) / kChunk * kChunk, calls[0].n) << "whole chunks before the last prompt position";
  EXPECT_EQ("snapkv r4", calls[0].view_spec);

  core.on_remote_compressed_fetched(1, {fetched(64)}, compressed_hit(4));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch, Call::prefill}), kinds(calls));
  EXPECT_EQ((kPrompt - 1) / kChunk * kChunk, calls[0].n)
      << "the whole full chunks before the last prompt position";
  ASSERT_EQ(1u, calls[1].spec.fetched_views.size());
  EXPECT_EQ(64u, calls[1].spec.fetched_views[0]->covered());
  EXPECT_TRUE(calls[1].spec.tier_ready) << "the net_fetcher makes the entry";
  EXPECT_FALSE(calls[1].spec.copy_view);
  EXPECT_EQ(0u, calls[1].spec.publish_chunk_tokens) << "every complete chunk fetched: nothing to rebuild";

  core.on_prefilled(guess(1, 7));  // the full chunks are still on their way
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::draft, calls[0].kind) << "a block from the guess";
  EXPECT_EQ(4u, calls[0].n);
  core.on_remote_fetched(1, hit(4), "");
  EXPECT_TRUE(out.take().empty()) << "the exact prefill waits for the block";
  DraftBlock b = drafts(1, {8, 9, 10, 11});
  core.on_drafted(b);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::finish_prefill, calls[0].kind);
  EXPECT_EQ(64u, calls[0].n) << "the tier holds the fetched positions";

  core.on_prefill_finished(exact(1, 7, true));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::verify}), kinds(calls)) << "nothing to publish: 4 chunks cached";
  EXPECT_EQ(7, calls[0].job.t0);
  EXPECT_EQ(kPrompt, calls[0].job.p0);
  EXPECT_EQ((std::vector<int32_t>{8, 9, 10, 11}), calls[0].job.drafts);
  EXPECT_FALSE(ready(a.result));
  core.on_verified(verified(1, {8, 9, 10, 11, 12}, 4));
  calls = out.take();
  EXPECT_EQ((std::vector<Call::Kind>{Call::commit, Call::draft}), kinds(calls));
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{7, 8, 9, 10, 11, 12}), r.output_ids);
  EXPECT_TRUE(r.stats.remote_compressed_first);
  EXPECT_EQ(4u, r.stats.remote_compressed_chunks_hit);
  EXPECT_EQ(1000u, r.stats.remote_bytes_compressed);
  EXPECT_EQ(4u, r.stats.remote_predrafted);
  EXPECT_TRUE(r.stats.remote_predrafts_kept);
  EXPECT_EQ(4u, r.stats.accepted);
  EXPECT_GT(r.stats.prefilled_after_seconds, 0.0) << "set when the exact prefill is through";
}

TEST(scheduler_core_remote, compressed_first_publishes_the_rebuilt_views_chunks_past_those_it_fetched) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 1, DecodeMode::vericache);
  a.ctx->cf_suffix_allowance = 2 * kChunk;
  core.submit(a.ctx);
  out.take();
  core.on_remote_compressed_fetched(1, {fetched(48)}, compressed_hit(3));  // chunk 3 missing
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch, Call::prefill}), kinds(calls));
  EXPECT_EQ(kChunk, calls[1].spec.publish_chunk_tokens) << "the drafter rebuilds past the fetched view";
  EXPECT_EQ(48u, calls[0].n) << "the full chunks leave the statistics window to the exact prefill";
  core.on_prefilled(guess(1, 7));
  out.take();
  core.on_remote_fetched(1, hit(3), "");
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::finish_prefill}), kinds(calls));
  EXPECT_EQ(48u, calls[0].n);
  PrefillResult done = exact(1, 7, false);
  done.views = {fetched(kPrompt)};  // the view rebuilt over the whole prompt
  core.on_prefill_finished(done);
  calls = out.take();
  ASSERT_EQ(Call::publish, calls[0].kind);
  EXPECT_EQ(3u, calls[0].n) << "the full chunk the store lacked";
  EXPECT_EQ(3u, calls[0].from) << "and the compressed one: the 3 fetched are not sent again";
  ASSERT_EQ(1u, calls[0].views.size());
  EXPECT_EQ("snapkv r4", calls[0].view_spec);
  core.on_remote_published(1, 1, 1);
  const auto r = a.result.get();
  EXPECT_EQ(1u, r.stats.remote_compressed_chunks_published);
}

TEST(scheduler_core_remote, compressed_first_fetches_its_compressed_chunks_in_segments_each_onto_the_views_before) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  core.set_remote_fetch_segment(3);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  core.submit(a.ctx);
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch_compressed}), kinds(calls));
  EXPECT_EQ(0u, calls[0].from);
  EXPECT_EQ(48u, calls[0].n);
  EXPECT_TRUE(calls[0].views.empty()) << "nothing to join the first segment onto";
  EXPECT_EQ(kChunk, calls[0].create) << "the longest suffix its reservation may cover";
  const auto head = fetched(48);
  core.on_remote_compressed_fetched(1, {head}, compressed_hit(3));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch_compressed}), kinds(calls)) << "the next segment";
  EXPECT_EQ(48u, calls[0].from);
  EXPECT_EQ(64u, calls[0].n);
  ASSERT_EQ(1u, calls[0].views.size());
  EXPECT_EQ(head, calls[0].views[0]) << "sent along for the net_fetcher to join onto";
  RemoteCompressedFetch second = compressed_hit(1);
  second.positions = 64;
  core.on_remote_compressed_fetched(1, {fetched(64)}, second);  // joined by the net_fetcher
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch, Call::prefill}), kinds(calls));
  ASSERT_EQ(1u, calls[1].spec.fetched_views.size());
  EXPECT_EQ(64u, calls[1].spec.fetched_views[0]->covered());
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ(4u, r.stats.remote_compressed_chunks_hit);
  EXPECT_EQ(64u, r.stats.remote_compressed_positions);
  EXPECT_EQ(1000u, r.stats.remote_bytes_compressed);
}

TEST(scheduler_core_remote, compressed_first_stops_at_a_segment_it_could_not_use_and_keeps_the_views_before) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  core.set_remote_fetch_segment(3);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  a.ctx->cf_suffix_allowance = 2 * kChunk;
  core.submit(a.ctx);
  out.take();
  const auto head = fetched(48);
  core.on_remote_compressed_fetched(1, {head}, compressed_hit(3));
  out.take();
  RemoteCompressedFetch second;  // what join_segment answers for a piece it cannot join
  second.positions = 48;
  second.bytes = 250;
  second.stop_reason = "the compressed chunks from 48 not joined: a piece of another shape";
  core.on_remote_compressed_fetched(1, {head}, second);
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::fetch, Call::prefill}), kinds(calls));
  EXPECT_EQ(head, calls[1].spec.fetched_views.at(0));
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ(3u, r.stats.remote_compressed_chunks_hit);
  EXPECT_EQ(48u, r.stats.remote_compressed_positions);
  EXPECT_EQ(second.stop_reason, r.stats.remote_compressed_stop_reason);
}

TEST(scheduler_core_remote, compressed_first_drafts_ahead_while_the_full_chunks_arrive_and_verifies_rounds_from_those_drafts) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  core.set_remote_predraft(12);
  auto a = compressed_first_request(1, 20, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_prefilled(guess(1, 7));
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(4u, calls[0].n);
  EXPECT_FALSE(calls[0].ahead) << "the block from the guess";
  DraftBlock b1 = drafts(1, {8, 9, 10, 11});
  core.on_drafted(b1);
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::draft}), kinds(calls)) << "the full chunks are not in: further ahead";
  EXPECT_TRUE(calls[0].ahead);
  EXPECT_EQ(4u, calls[0].n);
  DraftBlock b2 = drafts(1, {12, 13, 14, 15});
  core.on_drafted(b2);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_TRUE(calls[0].ahead);
  core.on_remote_fetched(1, hit(4), "");
  EXPECT_TRUE(out.take().empty()) << "the exact prefill waits for the block in progress";
  DraftBlock b3 = drafts(1, {16, 17, 18, 19});
  core.on_drafted(b3);
  ASSERT_EQ((std::vector<Call::Kind>{Call::finish_prefill}), kinds(out.take())) << "12 ahead: the cap";

  core.on_prefill_finished(exact(1, 7, true));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::verify}), kinds(calls));
  EXPECT_EQ(7, calls[0].job.t0);
  EXPECT_EQ(kPrompt, calls[0].job.p0);
  EXPECT_EQ((std::vector<int32_t>{8, 9, 10, 11}), calls[0].job.drafts) << "one round's length";
  // Every draft accepted and the verifier's next token is the next one ahead: the
  // next round verifies the drafts after it, with no drafting.
  core.on_verified(verified(1, {8, 9, 10, 11, 12}, 4));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::commit, Call::verify}), kinds(calls));
  EXPECT_EQ(kPrompt, calls[0].n);
  EXPECT_EQ(8u, calls[0].kept_ahead) << "the drafter keeps the 8 drafts past the round";
  EXPECT_EQ(12, calls[1].job.t0);
  EXPECT_EQ(kPrompt + 5, calls[1].job.p0);
  EXPECT_EQ((std::vector<int32_t>{13, 14, 15, 16}), calls[1].job.drafts);
  // A rejection: what is left ahead is dropped, drafting resumes from the verifier's token.
  core.on_verified(verified(1, {13, 14, 99}, 2));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::commit, Call::draft}), kinds(calls));
  EXPECT_EQ(kPrompt + 5, calls[0].n);
  EXPECT_EQ(0u, calls[0].kept_ahead);
  EXPECT_FALSE(calls[1].ahead);
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{7, 8, 9, 10, 11, 12, 13, 14, 99}), r.output_ids);
  EXPECT_EQ(12u, r.stats.remote_predrafted);
  EXPECT_EQ(2u, r.stats.remote_predraft_rounds);
  EXPECT_EQ(8u, r.stats.drafted);
  EXPECT_EQ(6u, r.stats.accepted);
}

TEST(scheduler_core_remote, compressed_first_drops_the_drafts_ahead_when_the_verifiers_next_token_is_not_the_next_draft) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  core.set_remote_predraft(8);
  auto a = compressed_first_request(1, 20, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_prefilled(guess(1, 7));
  DraftBlock b1 = drafts(1, {8, 9, 10, 11});
  core.on_drafted(b1);
  DraftBlock b2 = drafts(1, {12, 13, 14, 15});
  core.on_drafted(b2);
  out.take();
  core.on_remote_fetched(1, hit(4), "");
  ASSERT_EQ((std::vector<Call::Kind>{Call::finish_prefill}), kinds(out.take()));
  core.on_prefill_finished(exact(1, 7, true));
  ASSERT_EQ((std::vector<Call::Kind>{Call::verify}), kinds(out.take()));
  core.on_verified(verified(1, {8, 9, 10, 11, 42}, 4));  // all accepted, but 42, not 12
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::commit, Call::draft}), kinds(calls));
  EXPECT_EQ(0u, calls[0].kept_ahead) << "the drafter rolls back past the round";
  EXPECT_FALSE(calls[1].ahead);
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{7, 8, 9, 10, 11, 42}), r.output_ids);
  EXPECT_EQ(8u, r.stats.remote_predrafted);
  EXPECT_EQ(1u, r.stats.remote_predraft_rounds);
}

TEST(scheduler_core_remote, compressed_first_drafts_ahead_no_further_than_the_request_and_the_fold_interval_allow) {
  for (const auto& [max_tokens, fold_every, cap] :
       std::vector<std::tuple<size_t, size_t, size_t>>{{7, 64, 6}, {40, 5, 9}, {40, 0, 30}}) {
    FakeOutbox out;
    SchedulerCore core(out, 2, 4, false, nullptr);
    core.set_remote_chunk_tokens(kChunk);
    core.set_remote_predraft(30);
    auto a = compressed_first_request(1, max_tokens, DecodeMode::vericache);
    a.ctx->spec.fold_every = fold_every;
    admit_with_view(core, out, a);
    core.on_prefilled(guess(1, 7));
    size_t drafted = 0;
    for (auto calls = out.take(); !calls.empty() && calls[0].kind == Call::draft; calls = out.take()) {
      EXPECT_LE(drafted + calls[0].n, cap) << max_tokens << " tokens, fold every " << fold_every;
      DraftBlock b = drafts(1, std::vector<int32_t>(calls[0].n, 3));
      drafted += calls[0].n;
      core.on_drafted(b);
    }
    EXPECT_EQ(cap, drafted) << max_tokens << " tokens, fold every " << fold_every;
    core.cancel(1);
    EXPECT_EQ(cap, a.result.get().stats.remote_predrafted);
  }
}

TEST(scheduler_core_remote, compressed_first_drops_the_drafts_of_a_wrong_guess_and_drafts_from_the_exact_token) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_prefilled(guess(1, 7));
  DraftBlock b = drafts(1, {8, 9, 10, 11});
  core.on_drafted(b);
  out.take();
  core.on_remote_fetched(1, hit(2), "");  // the store had 2 full chunks only
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::finish_prefill, calls[0].kind);
  EXPECT_EQ(32u, calls[0].n);
  core.on_prefill_finished(exact(1, 5, false));
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::publish, Call::draft}), kinds(calls));
  EXPECT_EQ(2u, calls[0].n) << "the full chunks the store lacked";
  EXPECT_TRUE(calls[0].views.empty()) << "its compressed chunks came from the store";
  EXPECT_EQ(4u, calls[1].n) << "a round from the exact token";
  core.on_remote_published(1, 2);
  DraftBlock b2 = drafts(1, {6, 6, 6, 6});
  core.on_drafted(b2);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(5, calls[0].job.t0);
  EXPECT_EQ((std::vector<int32_t>{6, 6, 6, 6}), calls[0].job.drafts);
  core.cancel(1);
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{5}), r.output_ids) << "the guess was never emitted";
  EXPECT_FALSE(r.stats.remote_predrafts_kept);
  EXPECT_EQ(0u, r.stats.drafted) << "the dropped drafts were never verified";
}

TEST(scheduler_core_remote, compressed_first_prefills_exactly_at_once_when_the_full_chunks_came_before_the_guess) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_remote_fetched(1, hit(4), "");
  EXPECT_TRUE(out.take().empty()) << "waits for the drafter's prefill over the view";
  core.on_prefilled(guess(1, 7));
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::finish_prefill, calls[0].kind) << "no block from the guess";
  core.on_prefill_finished(exact(1, 7, false));
  EXPECT_EQ((std::vector<Call::Kind>{Call::draft}), kinds(out.take()));
  core.cancel(1);
  const auto s = a.result.get().stats;
  EXPECT_EQ(0u, s.remote_predrafted);
  EXPECT_EQ(0.0, s.remote_full_wait_seconds) << "the full chunks were in first";
}

TEST(scheduler_core_remote, compressed_first_in_lock_step_drafts_nothing_from_the_guess) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, /*lockstep=*/true, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_prefilled(guess(1, 7));
  EXPECT_TRUE(out.take().empty()) << "no block: the barriers count rounds";
  core.on_remote_fetched(1, hit(4), "");
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::finish_prefill}), kinds(calls));
  core.on_prefill_finished(exact(1, 7, false));
  EXPECT_EQ((std::vector<Call::Kind>{Call::draft}), kinds(out.take()));
  core.cancel(1);
  EXPECT_EQ(0u, a.result.get().stats.remote_predrafted);
}

TEST(scheduler_core_remote, compressed_first_runs_the_full_flow_without_a_hit_or_when_the_view_would_not_fit) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  core.submit(a.ctx);
  out.take();
  RemoteCompressedFetch none;
  none.stop_reason = "chunk 0 is not in the store";
  core.on_remote_compressed_fetched(1, {}, none);
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::fetch, calls[0].kind);
  EXPECT_EQ(48u, calls[0].n) << "the full flow's limit";

  // A short compressed prefix leaves a suffix longer than the reservation's chunk.
  auto b = compressed_first_request(2, 10, DecodeMode::vericache);
  core.submit(b.ctx);
  out.take();
  core.on_remote_compressed_fetched(2, {fetched(32)}, compressed_hit(2));
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::fetch, calls[0].kind);
  // A view larger than its allowance.
  auto c = compressed_first_request(3, 10, DecodeMode::vericache);
  const auto big = test::kivi_view(64);
  ASSERT_GT(big->held_bytes(), 0u);
  c.ctx->cf_view_allowance = big->held_bytes() - 1;
  core.submit(c.ctx);
  out.take();
  core.on_remote_compressed_fetched(3, {big}, compressed_hit(4));
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::fetch, calls[0].kind);
  core.on_remote_fetched(3, hit(3), "");
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_TRUE(calls[0].spec.fetched_views.empty());
  for (uint64_t id : {1, 2, 3}) core.cancel(id);
  EXPECT_EQ("chunk 0 is not in the store", a.result.get().stats.remote_compressed_stop_reason);
  const auto rb = b.result.get().stats;
  EXPECT_FALSE(rb.remote_compressed_first);
  EXPECT_NE(rb.remote_compressed_stop_reason.find("do not fit the fast memory reserved"), std::string::npos)
      << rb.remote_compressed_stop_reason;
  EXPECT_FALSE(c.result.get().stats.remote_compressed_first);
}

TEST(scheduler_core_remote, compressed_first_lossy_decodes_over_the_view_without_the_full_chunks) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 3, DecodeMode::lossy);
  core.submit(a.ctx);
  out.take();
  core.on_remote_compressed_fetched(1, {fetched(64)}, compressed_hit(4));
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::prefill}), kinds(calls)) << "no full chunk is fetched";
  EXPECT_FALSE(calls[0].spec.tier_ready);
  core.on_prefilled(prefilled(1, 7));  // lossy: the first token itself
  EXPECT_EQ((std::vector<Call::Kind>{Call::draft}), kinds(out.take()));
  DraftBlock blk = final_block(1, {8, 9});
  core.on_drafted(blk);
  calls = out.take();
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(calls)) << "no tier entry to free";
  const auto r = a.result.get();
  EXPECT_EQ((std::vector<int32_t>{7, 8, 9}), r.output_ids);
  EXPECT_TRUE(r.stats.remote_compressed_first);
  EXPECT_EQ(0u, r.stats.remote_bytes_fetched);
}

TEST(scheduler_core_remote, compressed_first_cancelled_while_predrafting_frees_the_entry_when_the_full_fetch_answers) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  core.set_remote_chunk_tokens(kChunk);
  auto a = compressed_first_request(1, 10, DecodeMode::vericache);
  admit_with_view(core, out, a);
  core.on_prefilled(guess(1, 7));
  out.take();
  core.cancel(1);
  auto calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::release}), kinds(calls)) << "the fetch still writes the entry";
  EXPECT_EQ("cancelled", a.result.get().finish_reason);
  DraftBlock b = drafts(1, {8, 9, 10, 11});
  core.on_drafted(b);
  EXPECT_TRUE(out.take().empty());
  core.on_remote_fetched(1, hit(4), "");
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::release_tier}), kinds(calls));
}

}  // namespace
}  // namespace vc::actors

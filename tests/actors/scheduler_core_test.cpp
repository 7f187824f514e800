// SchedulerCore without an actor system: a fake Outbox records what the scheduler
// asks the workers to do, and the tests play the workers' answers by hand.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_core_fixture.hpp"

namespace vc::actors {
namespace {

TEST(scheduler_core, admits_up_to_max_active_queues_the_rest_and_admits_the_next_when_one_finishes) {
  FakeOutbox out;
  SchedulerCore core(out, /*max_active=*/2, /*max_queue=*/8, /*lockstep=*/false, nullptr);
  std::vector<Submitted> rs;
  for (uint64_t id = 1; id <= 4; ++id) rs.push_back(make_request(id, 10, /*max_tokens=*/1));
  for (auto& r : rs) core.submit(r.ctx);

  auto calls = out.take();
  EXPECT_EQ((std::vector<uint64_t>{1, 2}), ids_of(calls, Call::prefill));
  EXPECT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].spec.prompt, rs[0].ctx->spec.prompt);
  EXPECT_EQ(2u, core.active());
  EXPECT_EQ(2u, core.queued());
  EXPECT_EQ(Phase::prefill, rs[0].ctx->phase);
  EXPECT_EQ(Phase::queued, rs[2].ctx->phase);

  // Request 2 finishes (one token asked for): request 3, the oldest waiting, starts.
  core.on_prefilled(prefilled(2, 7));
  ASSERT_TRUE(ready(rs[1].result));
  calls = out.take();
  ASSERT_EQ(2u, calls.size());
  EXPECT_EQ(Call::release, calls[0].kind);
  EXPECT_EQ(2u, calls[0].id);
  EXPECT_EQ(Call::prefill, calls[1].kind);
  EXPECT_EQ(3u, calls[1].id);
  EXPECT_EQ(2u, core.active());
  EXPECT_EQ(1u, core.queued());

  core.on_prefilled(prefilled(1, 7));
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(out.calls, Call::release));
  EXPECT_EQ((std::vector<uint64_t>{4}), ids_of(out.take(), Call::prefill));
  EXPECT_EQ(0u, core.queued());
  EXPECT_EQ(4u, core.counters().submitted);
  EXPECT_EQ(2u, core.counters().completed);
}

TEST(scheduler_core, answers_overloaded_at_once_when_the_queue_is_full) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 2, false, nullptr);
  std::vector<Submitted> rs;
  for (uint64_t id = 1; id <= 4; ++id) rs.push_back(make_request(id, 10, 8));
  for (auto& r : rs) core.submit(r.ctx);

  EXPECT_EQ(1u, core.active());
  EXPECT_EQ(2u, core.queued());
  EXPECT_EQ((std::vector<uint64_t>{1}), ids_of(out.take(), Call::prefill));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(ready(rs[i].result)) << i;
  ASSERT_TRUE(ready(rs[3].result));
  const auto r = rs[3].result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ("error", r.finish_reason);
  EXPECT_EQ(0u, r.error.rfind("overloaded", 0)) << r.error;
  EXPECT_EQ(1u, core.counters().rejected);
  EXPECT_EQ(4u, core.counters().submitted);
}

TEST(scheduler_core, runs_prefill_draft_verify_rounds_and_stops_with_length_at_max_tokens) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(5, /*prompt=*/10, /*max_tokens=*/6, /*L=*/3);
  std::vector<int32_t> streamed;
  r.ctx->on_token = [&](uint64_t id, const vericache::EmittedToken& tok) {
    EXPECT_EQ(5u, id);
    streamed.push_back(tok.id);
  };
  core.submit(r.ctx);
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::prefill, calls[0].kind);

  // Prefilled: the first token is emitted and 3 drafts are asked for.
  core.on_prefilled(prefilled(5, 100));
  EXPECT_EQ((std::vector<int32_t>{100}), streamed);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::draft, calls[0].kind);
  EXPECT_EQ(3u, calls[0].n);
  EXPECT_EQ(Phase::draft, r.ctx->phase);

  // Drafted: verify t0 = the last emitted token at p0 = prompt + emitted - 1.
  auto b = drafts(5, {101, 102, 103});
  core.on_drafted(b);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  ASSERT_EQ(Call::verify, calls[0].kind);
  EXPECT_EQ(100, calls[0].job.t0);
  EXPECT_EQ(10u, calls[0].job.p0);
  EXPECT_EQ((std::vector<int32_t>{101, 102, 103}), calls[0].job.drafts);
  EXPECT_EQ(Phase::verify, r.ctx->phase);
  EXPECT_TRUE(out.calls.empty());

  // Verified: two drafts accepted plus a correction; the drafter commits before it
  // drafts again, and the next round asks for what may still be emitted minus one.
  auto v1 = verified(5, {101, 102, 200}, 2);
  core.on_verified(v1);
  EXPECT_EQ((std::vector<int32_t>{100, 101, 102, 200}), streamed);
  calls = out.take();
  ASSERT_EQ((std::vector<Call::Kind>{Call::commit, Call::draft}), kinds(calls));
  EXPECT_EQ(v1, calls[0].outcome);
  EXPECT_EQ(10u, calls[0].n);  // p0 of the verified round
  EXPECT_EQ(1u, calls[1].n);   // 2 tokens left: 1 draft
  EXPECT_FALSE(ready(r.result));

  auto b2 = drafts(5, {201});
  core.on_drafted(b2);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  ASSERT_EQ(Call::verify, calls[0].kind);
  EXPECT_EQ(200, calls[0].job.t0);
  EXPECT_EQ(13u, calls[0].job.p0);  // 10 + 4 - 1

  // The last round fills max_tokens exactly: done, no commit, no draft.
  core.on_verified(verified(5, {201, 202}, 1));
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release, calls[0].kind);
  EXPECT_TRUE(calls[0].full_tier);
  EXPECT_EQ(Phase::done, r.ctx->phase);
  ASSERT_TRUE(ready(r.result));
  const auto res = r.result.get();
  EXPECT_TRUE(res.ok);
  EXPECT_EQ("length", res.finish_reason);
  EXPECT_EQ((std::vector<int32_t>{100, 101, 102, 200, 201, 202}), res.output_ids);
  EXPECT_EQ(streamed, res.output_ids);
  EXPECT_EQ((std::vector<float>{-0.5f, -0.25f, -0.25f, -0.25f, -0.25f, -0.25f}),
            res.output_logprobs);
  EXPECT_EQ(2u, res.stats.rounds);
  EXPECT_EQ(4u, res.stats.drafted);
  EXPECT_EQ(3u, res.stats.accepted);
  EXPECT_EQ(10u, res.stats.prompt_tokens);
  EXPECT_EQ(6u, res.stats.output_tokens);
  EXPECT_EQ(0u, core.active());
  EXPECT_EQ(1u, core.counters().completed);
  EXPECT_EQ(6u, core.counters().tokens);
}

TEST(scheduler_core, emits_no_more_than_max_tokens_from_a_longer_verified_block) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(1, 5, 3, 8);
  core.submit(r.ctx);
  core.on_prefilled(prefilled(1, 10));
  auto calls = out.take();
  ASSERT_EQ(Call::draft, calls.back().kind);
  EXPECT_EQ(1u, calls.back().n);  // min(8, (3 - 1) - 1)
  auto b = drafts(1, {11});
  core.on_drafted(b);
  out.take();
  // More tokens than may be emitted (a verifier bug, or a stale job): cut at max.
  core.on_verified(verified(1, {11, 12, 13, 14}, 3));
  ASSERT_TRUE(ready(r.result));
  const auto res = r.result.get();
  EXPECT_EQ("length", res.finish_reason);
  EXPECT_EQ((std::vector<int32_t>{10, 11, 12}), res.output_ids);
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(out.take()));
}

TEST(scheduler_core, asks_for_zero_drafts_when_one_token_is_left) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(1, 5, 2, 16);
  core.submit(r.ctx);
  core.on_prefilled(prefilled(1, 10));
  auto calls = out.take();
  ASSERT_EQ(Call::draft, calls.back().kind);
  EXPECT_EQ(0u, calls.back().n);
  auto b = drafts(1, {});
  core.on_drafted(b);
  calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_TRUE(calls[0].job.drafts.empty());
  EXPECT_EQ(5u, calls[0].job.p0);
  core.on_verified(verified(1, {20}, 0));
  const auto res = r.result.get();
  EXPECT_EQ((std::vector<int32_t>{10, 20}), res.output_ids);
  EXPECT_EQ("length", res.finish_reason);
}

TEST(scheduler_core, full_and_lossy_modes_emit_final_blocks_and_ask_for_the_next_block) {
  for (DecodeMode mode : {DecodeMode::full, DecodeMode::lossy}) {
    FakeOutbox out;
    SchedulerCore core(out, 4, 4, false, nullptr);
    auto r = make_request(3, 8, 20, 4, mode);
    core.submit(r.ctx);
    out.take();
    core.on_prefilled(prefilled(3, 1));
    auto calls = out.take();
    ASSERT_EQ(1u, calls.size());
    ASSERT_EQ(Call::draft, calls[0].kind);
    EXPECT_EQ(16u, calls[0].n);  // a block of final tokens, not L drafts

    std::vector<int32_t> block;
    for (int32_t i = 0; i < 16; ++i) block.push_back(100 + i);
    auto b = final_block(3, block);
    core.on_drafted(b);
    calls = out.take();
    ASSERT_EQ(1u, calls.size()) << "no verify in full/lossy mode";
    ASSERT_EQ(Call::draft, calls[0].kind);
    EXPECT_EQ(3u, calls[0].n);  // 20 - 17 left
    EXPECT_EQ(17u, r.ctx->result.output_ids.size());

    auto b2 = final_block(3, {200, 201, 202});
    core.on_drafted(b2);
    calls = out.take();
    ASSERT_EQ(1u, calls.size());
    EXPECT_EQ(Call::release, calls[0].kind);
    EXPECT_FALSE(calls[0].full_tier);
    const auto res = r.result.get();
    EXPECT_TRUE(res.ok);
    EXPECT_EQ("length", res.finish_reason);
    ASSERT_EQ(20u, res.output_ids.size());
    EXPECT_EQ(1, res.output_ids[0]);
    EXPECT_EQ(100, res.output_ids[1]);
    EXPECT_EQ(202, res.output_ids[19]);
    EXPECT_EQ(-1.0f, res.output_logprobs[19]);
  }
}

TEST(scheduler_core, stops_at_an_end_of_sequence_token_inside_a_verified_block) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(1, 5, 50, 4);
  r.ctx->stop.eos_ids = {2};
  std::vector<int32_t> streamed;
  r.ctx->on_token = [&](uint64_t, const vericache::EmittedToken& t) { streamed.push_back(t.id); };
  core.submit(r.ctx);
  core.on_prefilled(prefilled(1, 10));
  auto b = drafts(1, {11, 2, 12, 13});
  core.on_drafted(b);
  out.take();
  core.on_verified(verified(1, {11, 2, 12, 13, 14}, 4));
  EXPECT_EQ((std::vector<int32_t>{10, 11, 2}), streamed);
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(out.take()));
  const auto res = r.result.get();
  EXPECT_TRUE(res.ok);
  EXPECT_EQ("eos", res.finish_reason);
  EXPECT_EQ((std::vector<int32_t>{10, 11, 2}), res.output_ids);
  EXPECT_EQ(3u, res.output_logprobs.size());
}

TEST(scheduler_core, stops_at_an_end_of_sequence_token_inside_a_final_block) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(1, 5, 50, 4, DecodeMode::full);
  r.ctx->stop.eos_ids = {2};
  core.submit(r.ctx);
  core.on_prefilled(prefilled(1, 10));
  out.take();
  auto b = final_block(1, {11, 12, 2, 13, 14});
  core.on_drafted(b);
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(out.take()));
  const auto res = r.result.get();
  EXPECT_EQ("eos", res.finish_reason);
  EXPECT_EQ((std::vector<int32_t>{10, 11, 12, 2}), res.output_ids);
}

TEST(scheduler_core, stops_when_the_first_token_is_end_of_sequence) {
  FakeOutbox out;
  SchedulerCore core(out, 4, 4, false, nullptr);
  auto r = make_request(1, 5, 50, 4);
  r.ctx->stop.eos_ids = {2};
  core.submit(r.ctx);
  out.take();
  core.on_prefilled(prefilled(1, 2));
  EXPECT_EQ((std::vector<Call::Kind>{Call::release}), kinds(out.take()));
  const auto res = r.result.get();
  EXPECT_EQ("eos", res.finish_reason);
  EXPECT_EQ((std::vector<int32_t>{2}), res.output_ids);
}

}  // namespace
}  // namespace vc::actors

// SchedulerCore without an actor system: a fake Outbox records what the scheduler
// asks the workers to do, and the tests play the workers' answers by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/scheduler_core.hpp"

namespace vc::actors {
namespace {

using Phase = RequestCtx::Phase;

/// One Outbox call.
struct Call {
  enum Kind { prefill, draft, verify, commit, release } kind = prefill;
  uint64_t id = 0;
  size_t n = 0;           // draft: tokens; commit: p0
  VerifyJob job;          // verify
  std::shared_ptr<const VerifyOutcome> outcome;  // commit
  bool full_tier = false;  // release
  DraftSpec spec;          // prefill
};

class FakeOutbox final : public Outbox {
 public:
  void prefill(const DraftSpec& spec) override {
    Call c;
    c.kind = Call::prefill;
    c.id = spec.id;
    c.spec = spec;
    calls.push_back(c);
  }
  void draft(uint64_t id, size_t n) override {
    Call c;
    c.kind = Call::draft;
    c.id = id;
    c.n = n;
    calls.push_back(c);
  }
  void verify(const VerifyJob& job) override {
    Call c;
    c.kind = Call::verify;
    c.id = job.id;
    c.job = job;
    calls.push_back(c);
  }
  void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0) override {
    Call c;
    c.kind = Call::commit;
    c.id = v->id;
    c.n = p0;
    c.outcome = std::move(v);
    calls.push_back(c);
  }
  void release(uint64_t id, bool full_tier) override {
    Call c;
    c.kind = Call::release;
    c.id = id;
    c.full_tier = full_tier;
    calls.push_back(c);
  }

  /// The calls since the last take(), which forgets them.
  std::vector<Call> take() { return std::exchange(calls, {}); }

  std::vector<Call> calls;
};

struct Submitted {
  std::shared_ptr<RequestCtx> ctx;
  std::future<vericache::Result> result;
};

Submitted make_request(uint64_t id, size_t prompt_size, size_t max_tokens, size_t L = 4,
                       DecodeMode mode = DecodeMode::vericache) {
  Submitted s;
  s.ctx = std::make_shared<RequestCtx>();
  s.ctx->id = id;
  s.ctx->spec.id = id;
  s.ctx->spec.mode = mode;
  for (size_t i = 0; i < prompt_size; ++i) s.ctx->spec.prompt.push_back(int32_t(1000 + i));
  s.ctx->spec.max_new_tokens = max_tokens;
  s.ctx->stop.max_tokens = max_tokens;
  s.ctx->policy = DraftLengthPolicy::fixed(L);
  s.ctx->result.id = id;
  s.result = s.ctx->promise.get_future();
  return s;
}

bool ready(const std::future<vericache::Result>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

PrefillResult prefilled(uint64_t id, int32_t token) {
  PrefillResult r;
  r.id = id;
  r.token = token;
  r.logprob = -0.5f;
  return r;
}

DraftBlock drafts(uint64_t id, std::vector<int32_t> tokens) {
  DraftBlock b;
  b.id = id;
  b.tokens = std::move(tokens);
  b.seconds = 0.001;
  return b;
}

DraftBlock final_block(uint64_t id, std::vector<int32_t> tokens) {
  DraftBlock b;
  b.id = id;
  b.logprobs.assign(tokens.size(), -1.0f);
  b.tokens = std::move(tokens);
  b.final = true;
  return b;
}

std::shared_ptr<const VerifyOutcome> verified(uint64_t id, std::vector<int32_t> tokens,
                                              size_t accepted) {
  auto v = std::make_shared<VerifyOutcome>();
  v->id = id;
  v->logprobs.assign(tokens.size(), -0.25f);
  v->tokens = std::move(tokens);
  v->accepted = accepted;
  v->seconds = 0.002;
  return v;
}

std::vector<Call::Kind> kinds(const std::vector<Call>& calls) {
  std::vector<Call::Kind> k;
  for (const auto& c : calls) k.push_back(c.kind);
  return k;
}

std::vector<uint64_t> ids_of(const std::vector<Call>& calls, Call::Kind kind) {
  std::vector<uint64_t> ids;
  for (const auto& c : calls)
    if (c.kind == kind) ids.push_back(c.id);
  return ids;
}

// ---------------------------------------------------------------------------------

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
  r.ctx->on_token = [&](uint64_t id, int32_t tok) {
    EXPECT_EQ(5u, id);
    streamed.push_back(tok);
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
  r.ctx->on_token = [&](uint64_t, int32_t t) { streamed.push_back(t); };
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

TEST(scheduler_core, cancelling_a_queued_request_resolves_it_cancelled_without_touching_the_workers) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  auto b = make_request(2, 5, 10);
  core.submit(a.ctx);
  core.submit(b.ctx);
  out.take();
  core.cancel(2);
  ASSERT_TRUE(ready(b.result));
  const auto res = b.result.get();
  EXPECT_TRUE(res.ok);
  EXPECT_EQ("cancelled", res.finish_reason);
  EXPECT_TRUE(out.take().empty()) << "nothing was prefilled: nothing to release";
  EXPECT_EQ(0u, core.queued());
  EXPECT_EQ(1u, core.active());
  EXPECT_FALSE(ready(a.result));
  EXPECT_EQ(1u, core.counters().cancelled);
}

TEST(scheduler_core, cancelling_an_active_request_releases_it_and_admits_the_next) {
  struct Case {
    DecodeMode mode;
    bool full_tier;
  };
  for (const Case k : {Case{DecodeMode::vericache, true}, Case{DecodeMode::full, false},
                       Case{DecodeMode::lossy, false}}) {
    FakeOutbox out;
    SchedulerCore core(out, 1, 4, false, nullptr);
    auto a = make_request(1, 5, 10, 4, k.mode);
    auto b = make_request(2, 5, 10);
    core.submit(a.ctx);
    core.submit(b.ctx);
    core.on_prefilled(prefilled(1, 10));
    out.take();
    core.cancel(1);
    auto calls = out.take();
    ASSERT_EQ(2u, calls.size());
    EXPECT_EQ(Call::release, calls[0].kind);
    EXPECT_EQ(1u, calls[0].id);
    EXPECT_EQ(k.full_tier, calls[0].full_tier);
    EXPECT_EQ(Call::prefill, calls[1].kind);
    EXPECT_EQ(2u, calls[1].id);
    ASSERT_TRUE(ready(a.result));
    const auto res = a.result.get();
    EXPECT_TRUE(res.ok);
    EXPECT_EQ("cancelled", res.finish_reason);
    EXPECT_EQ((std::vector<int32_t>{10}), res.output_ids);
    EXPECT_EQ(1u, core.counters().cancelled);

    // The block that was in flight arrives late: ignored.
    auto late = k.mode == DecodeMode::vericache ? drafts(1, {1, 2, 3, 4})
                                                : final_block(1, {1, 2, 3, 4});
    core.on_drafted(late);
    core.on_verified(verified(1, {1, 2}, 1));
    core.on_failed(1, "late");
    EXPECT_TRUE(out.take().empty());
    EXPECT_EQ(0u, core.counters().failed);
  }
}

TEST(scheduler_core, cancelling_during_prefill_releases_both_tiers) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  core.submit(a.ctx);
  out.take();
  core.cancel(1);
  auto calls = out.take();
  ASSERT_EQ(1u, calls.size());
  EXPECT_EQ(Call::release, calls[0].kind);
  EXPECT_TRUE(calls[0].full_tier);
  EXPECT_EQ("cancelled", a.result.get().finish_reason);
  core.on_prefilled(prefilled(1, 3));  // the prefill lands afterwards: ignored
  EXPECT_TRUE(out.take().empty());
}

TEST(scheduler_core, a_failure_resolves_the_request_with_its_error_and_releases_it) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  auto b = make_request(2, 5, 10);
  core.submit(a.ctx);
  core.submit(b.ctx);
  core.on_prefilled(prefilled(1, 10));
  auto blk = drafts(1, {1, 2, 3, 4});
  core.on_drafted(blk);
  out.take();
  core.on_failed(1, "full tier: request 1 is gone");
  auto calls = out.take();
  ASSERT_EQ(2u, calls.size());
  EXPECT_EQ(Call::release, calls[0].kind);
  EXPECT_TRUE(calls[0].full_tier);
  EXPECT_EQ(Call::prefill, calls[1].kind);
  EXPECT_EQ(2u, calls[1].id);
  const auto res = a.result.get();
  EXPECT_FALSE(res.ok);
  EXPECT_EQ("error", res.finish_reason);
  EXPECT_EQ("full tier: request 1 is gone", res.error);
  EXPECT_EQ(1u, core.counters().failed);
  EXPECT_EQ(0u, core.counters().completed);
  // The verify pass that was in flight answers late: ignored.
  core.on_verified(verified(1, {1, 2}, 1));
  EXPECT_TRUE(out.take().empty());
}

TEST(scheduler_core, ignores_messages_about_unknown_requests) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  core.submit(a.ctx);
  out.take();
  core.on_prefilled(prefilled(99, 1));
  auto b = drafts(99, {1, 2});
  core.on_drafted(b);
  auto f = final_block(99, {1, 2});
  core.on_drafted(f);
  core.on_verified(verified(99, {1}, 0));
  core.on_failed(99, "boom");
  core.cancel(99);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(1u, core.active());
  EXPECT_FALSE(ready(a.result));
  const auto& c = core.counters();
  EXPECT_EQ(0u, c.failed + c.cancelled + c.completed + c.tokens);
}

TEST(scheduler_core, lockstep_verifies_only_once_everyone_has_drafted_and_drafts_once_everyone_verified) {
  FakeOutbox out;
  SchedulerCore core(out, 3, 4, /*lockstep=*/true, nullptr);
  std::vector<Submitted> rs;
  for (uint64_t id = 1; id <= 3; ++id) rs.push_back(make_request(id, 10, 100, 4));
  for (auto& r : rs) core.submit(r.ctx);
  EXPECT_EQ((std::vector<uint64_t>{1, 2, 3}), ids_of(out.take(), Call::prefill));

  core.on_prefilled(prefilled(1, 10));
  core.on_prefilled(prefilled(2, 20));
  EXPECT_EQ((std::vector<uint64_t>{1, 2}), ids_of(out.take(), Call::draft));
  auto b1 = drafts(1, {11, 12, 13, 14});
  auto b2 = drafts(2, {21, 22, 23, 24});
  core.on_drafted(b1);
  core.on_drafted(b2);
  EXPECT_TRUE(out.take().empty()) << "request 3 is still prefilling";

  core.on_prefilled(prefilled(3, 30));
  EXPECT_EQ((std::vector<uint64_t>{3}), ids_of(out.take(), Call::draft));
  auto b3 = drafts(3, {31, 32, 33, 34});
  core.on_drafted(b3);
  auto calls = out.take();
  ASSERT_EQ(3u, calls.size());
  EXPECT_EQ((std::vector<Call::Kind>{Call::verify, Call::verify, Call::verify}), kinds(calls));
  for (const auto& c : calls) {
    EXPECT_EQ(int32_t(c.id * 10), c.job.t0);
    EXPECT_EQ(10u, c.job.p0);
    EXPECT_EQ(4u, c.job.drafts.size());
  }

  core.on_verified(verified(2, {21, 99}, 1));
  calls = out.take();
  EXPECT_EQ((std::vector<Call::Kind>{Call::commit}), kinds(calls)) << "no draft while others verify";
  core.on_verified(verified(1, {11, 12, 13, 14, 15}, 4));
  EXPECT_EQ((std::vector<Call::Kind>{Call::commit}), kinds(out.take()));
  core.on_verified(verified(3, {38}, 0));
  calls = out.take();
  ASSERT_EQ(4u, calls.size());
  EXPECT_EQ(Call::commit, calls[0].kind);
  std::vector<uint64_t> drafted = ids_of(calls, Call::draft);
  std::sort(drafted.begin(), drafted.end());
  EXPECT_EQ((std::vector<uint64_t>{1, 2, 3}), drafted);

  // Next round: a request that finishes while the others verify lifts the barrier.
  auto c1 = drafts(1, {1, 1, 1, 1});
  auto c2 = drafts(2, {2, 2, 2, 2});
  auto c3 = drafts(3, {3, 3, 3, 3});
  core.on_drafted(c1);
  core.on_drafted(c2);
  EXPECT_TRUE(out.take().empty());
  core.on_drafted(c3);
  calls = out.take();
  ASSERT_EQ(3u, calls.size());
  for (const auto& c : calls) {
    ASSERT_EQ(Call::verify, c.kind);
    // t0 = the last emitted token, p0 = prompt + emitted - 1.
    const std::pair<int32_t, size_t> want = c.id == 1 ? std::pair<int32_t, size_t>{15, 15}
                                            : c.id == 2 ? std::pair<int32_t, size_t>{99, 12}
                                                        : std::pair<int32_t, size_t>{38, 11};
    EXPECT_EQ(want, std::make_pair(c.job.t0, c.job.p0)) << "request " << c.id;
  }
  core.on_verified(verified(1, {1, 7}, 1));
  core.on_verified(verified(2, {2, 7}, 1));
  EXPECT_EQ((std::vector<Call::Kind>{Call::commit, Call::commit}), kinds(out.take()));
  core.cancel(3);
  calls = out.take();
  EXPECT_EQ((std::vector<uint64_t>{3}), ids_of(calls, Call::release));
  std::vector<uint64_t> next = ids_of(calls, Call::draft);
  std::sort(next.begin(), next.end());
  EXPECT_EQ((std::vector<uint64_t>{1, 2}), next);
  EXPECT_EQ("cancelled", rs[2].result.get().finish_reason);
}

TEST(scheduler_core, lockstep_holds_a_request_admitted_during_verification_until_the_round_ends) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, true, nullptr);
  auto a = make_request(1, 10, 100, 4);
  auto b = make_request(2, 10, 1, 4);  // finishes at its first token
  auto c = make_request(3, 10, 100, 4);
  core.submit(a.ctx);
  core.submit(b.ctx);
  core.submit(c.ctx);
  out.take();
  core.on_prefilled(prefilled(1, 10));
  auto d = drafts(1, {1, 2, 3, 4});
  core.on_drafted(d);
  EXPECT_TRUE(ids_of(out.calls, Call::verify).empty()) << "request 2 is still prefilling";
  core.on_prefilled(prefilled(2, 20));  // done: request 3 is admitted, request 1 verifies
  auto calls = out.take();
  EXPECT_EQ((std::vector<uint64_t>{2}), ids_of(calls, Call::release));
  EXPECT_EQ((std::vector<uint64_t>{3}), ids_of(calls, Call::prefill));
  // Request 1 waits at the barrier while request 3 prefills (request 3 has not
  // drafted yet); were request 1 sent to verify first, request 3 would have to wait
  // for that verify before drafting. Either order keeps the rounds in lock step.
  const auto verifies = ids_of(calls, Call::verify);
  if (verifies.empty()) {
    core.on_prefilled(prefilled(3, 30));
    calls = out.take();
    EXPECT_EQ((std::vector<uint64_t>{3}), ids_of(calls, Call::draft));
    auto d3 = drafts(3, {5, 6, 7, 8});
    core.on_drafted(d3);
    calls = out.take();
    EXPECT_EQ(2u, ids_of(calls, Call::verify).size());
  } else {
    EXPECT_EQ((std::vector<uint64_t>{1}), verifies);
    core.on_prefilled(prefilled(3, 30));
    EXPECT_TRUE(ids_of(out.take(), Call::draft).empty()) << "request 1 is verifying";
    core.on_verified(verified(1, {1, 9}, 1));
    calls = out.take();
    std::vector<uint64_t> next = ids_of(calls, Call::draft);
    std::sort(next.begin(), next.end());
    EXPECT_EQ((std::vector<uint64_t>{1, 3}), next);
  }
}

TEST(scheduler_core, cancel_all_resolves_every_queued_and_active_request) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 8, false, nullptr);
  std::vector<Submitted> rs;
  for (uint64_t id = 1; id <= 5; ++id) rs.push_back(make_request(id, 5, 10));
  for (auto& r : rs) core.submit(r.ctx);
  core.on_prefilled(prefilled(1, 10));
  out.take();
  core.cancel_all();
  for (auto& r : rs) {
    ASSERT_TRUE(ready(r.result)) << r.ctx->id;
    const auto res = r.result.get();
    EXPECT_TRUE(res.ok);
    EXPECT_EQ("cancelled", res.finish_reason);
  }
  auto calls = out.take();
  std::vector<uint64_t> released = ids_of(calls, Call::release);
  std::sort(released.begin(), released.end());
  EXPECT_EQ((std::vector<uint64_t>{1, 2}), released);
  EXPECT_TRUE(ids_of(calls, Call::prefill).empty()) << "nothing new starts while cancelling";
  EXPECT_EQ(0u, core.active());
  EXPECT_EQ(0u, core.queued());
  EXPECT_EQ(5u, core.counters().cancelled);
}

}  // namespace
}  // namespace vc::actors

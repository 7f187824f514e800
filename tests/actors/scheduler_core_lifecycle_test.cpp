// SchedulerCore lifecycle without an actor system: cancellation, failures, unknown
// requests, lock-step barriers and shutdown.
#include <gtest/gtest.h>

#include "tests/actors/scheduler_core_fixture.hpp"

namespace vc::actors {
namespace {

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

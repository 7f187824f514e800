// SchedulerCore and a first token sent ahead of the prefill's end (first_token_msg:
// the drafter has the prompt's exact logits, the view is still being built): the
// token is emitted at once and once only; a token that ends the request ends it
// during the prefill; full mode and requests not prefilling ignore it.
#include <gtest/gtest.h>

#include <vector>

#include "tests/actors/scheduler_core_fixture.hpp"

namespace vc::actors {
namespace {

TEST(scheduler_core_first_token, a_first_token_sent_ahead_is_emitted_at_once_and_not_again) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  std::vector<int32_t> streamed;
  a.ctx->on_token = [&](uint64_t, const vericache::EmittedToken& t) { streamed.push_back(t.id); };
  core.submit(a.ctx);
  out.take();
  core.on_first_token(1, 7, -0.5f, {});
  EXPECT_EQ(streamed, std::vector<int32_t>{7}) << "emitted before the prefill's end";
  EXPECT_TRUE(out.take().empty()) << "no round before the view exists";
  core.on_first_token(1, 7, -0.5f, {});  // a second one is ignored
  EXPECT_EQ(streamed.size(), 1u);
  core.on_prefilled(prefilled(1, 7));
  EXPECT_EQ(streamed, std::vector<int32_t>{7}) << "the prefill's own token is not emitted again";
  EXPECT_EQ(kinds(out.take()), std::vector<Call::Kind>{Call::draft})
      << "the first round starts once the view exists";
}

TEST(scheduler_core_first_token, a_first_token_that_ends_the_request_ends_it_once_the_prefill_is_through) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 1);  // one token
  std::vector<int32_t> streamed;
  a.ctx->on_token = [&](uint64_t, const vericache::EmittedToken& t) { streamed.push_back(t.id); };
  core.submit(a.ctx);
  out.take();
  core.on_first_token(1, 9, -0.25f, {});
  EXPECT_EQ(streamed, std::vector<int32_t>{9}) << "streamed at once";
  EXPECT_FALSE(ready(a.result)) << "the prefill still runs: its chunks and stats come first";
  EXPECT_TRUE(out.take().empty()) << "nothing released under the prefill";
  core.on_prefilled(prefilled(1, 9));
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.output_ids, std::vector<int32_t>{9});
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_GT(r.stats.prefilled_after_seconds, 0.0);
  EXPECT_EQ(streamed.size(), 1u);
  const auto calls = out.take();
  EXPECT_EQ(ids_of(calls, Call::draft).size(), 0u) << "no round after the last token";
  EXPECT_EQ(ids_of(calls, Call::release), std::vector<uint64_t>{1});
}

TEST(scheduler_core_first_token, a_prefill_whose_token_differs_from_the_one_sent_ahead_fails_the_request) {
  FakeOutbox out;
  SchedulerCore core(out, 1, 4, false, nullptr);
  auto a = make_request(1, 5, 10);
  core.submit(a.ctx);
  out.take();
  core.on_first_token(1, 7, -0.5f, {});
  core.on_prefilled(prefilled(1, 8));
  ASSERT_TRUE(ready(a.result));
  const auto r = a.result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("the first token sent ahead differs"), std::string::npos) << r.error;
}

TEST(scheduler_core_first_token, full_mode_and_requests_not_prefilling_ignore_it) {
  FakeOutbox out;
  SchedulerCore core(out, 2, 4, false, nullptr);
  auto full = make_request(1, 5, 10, 4, DecodeMode::full);
  auto vc = make_request(2, 5, 10);
  core.submit(full.ctx);
  core.submit(vc.ctx);
  out.take();
  core.on_first_token(1, 7, -0.5f, {});
  EXPECT_TRUE(full.ctx->result.output_ids.empty()) << "full mode emits at on_prefilled";
  core.on_prefilled(prefilled(2, 4));  // prefilled: no longer in its prefill
  const size_t emitted = vc.ctx->result.output_ids.size();
  core.on_first_token(2, 5, -0.5f, {});
  EXPECT_EQ(vc.ctx->result.output_ids.size(), emitted);
  core.on_first_token(99, 5, -0.5f, {});  // unknown: ignored
}

}  // namespace
}  // namespace vc::actors

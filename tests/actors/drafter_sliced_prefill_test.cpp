// The drafter actor with its prefills sliced into chunks (actors::drafter with
// slice_prefill), driven by a caf::scoped_actor that plays the scheduler: prompts
// prefilled at once give the answers of prefills run whole, a short prompt is done
// before a long one sent ahead of it, and a full-mode prompt waiting behind one that
// is released starts.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/workers.hpp"
#include "kvtiers/full_tier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc::actors {
namespace {

struct Rig {
  std::shared_ptr<const Model> model = test::tinycode();
  HostFullTier tier{model->kv_config(16, DType::bf16)};
  std::shared_ptr<TraceRecorder> trace = std::make_shared<TraceRecorder>(false);
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  Rig() {
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

DraftSpec spec(uint64_t id, size_t n, DecodeMode mode, const char* compressor = "snapkv") {
  std::mt19937 rng{uint32_t(id)};
  DraftSpec s;
  s.id = id;
  s.prompt = test::random_tokens(rng, n, 2048, 2046);
  s.mode = mode;
  s.compressor = compressor;
  s.max_new_tokens = 64;
  s.prefill_chunk = 64;
  return s;
}

struct Answer {
  size_t order = 0;  // 0 first
  PrefillResult result;
};

// Sends every spec at once to a fresh drafter; its answers by id, in arrival order.
// `wall`: seconds from the first send to the last answer.
std::map<uint64_t, Answer> prefill_all(bool slice, const std::vector<DraftSpec>& specs,
                                       double* wall = nullptr) {
  Rig rig;
  std::map<uint64_t, Answer> out;
  const auto t0 = std::chrono::steady_clock::now();
  {
    caf::scoped_actor sched{*rig.sys};
    auto batcher = std::make_shared<DraftBatcher>(rig.model, &rig.tier, 16384, DType::bf16, 1);
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace, slice);
    for (const auto& s : specs) sched->send(drafter, prefill_msg{s});
    for (size_t i = 0; i < specs.size(); ++i)
      sched->receive([&](prefilled_msg& m) { out[m.result.id] = Answer{i, m.result}; },
                     [&](failed_msg& m) { ADD_FAILURE() << "request " << m.id << ": " << m.error; },
                     caf::after(std::chrono::seconds(60)) >> [] { ADD_FAILURE() << "no prefill answer"; });
    if (wall) *wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& s : specs) sched->send(drafter, release_msg{s.id});
    sched->send_exit(drafter, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();
  return out;
}

TEST(drafter_sliced_prefill, prompts_prefilled_at_once_give_the_answers_of_whole_prefills_and_the_short_one_is_done_first) {
  const std::vector<DraftSpec> specs = {spec(1, 1500, DecodeMode::vericache),
                                        spec(2, 700, DecodeMode::lossy, "h2o"),
                                        spec(3, 300, DecodeMode::vericache, "kvzip"),
                                        spec(4, 200, DecodeMode::full),
                                        spec(5, 150, DecodeMode::full),  // wait for 4, in order
                                        spec(6, 100, DecodeMode::full)};
  double wall = 0;
  const auto sliced = prefill_all(true, specs, &wall);
  const auto whole = prefill_all(false, specs);
  ASSERT_EQ(specs.size(), sliced.size());
  ASSERT_EQ(specs.size(), whole.size());
  for (const auto& s : specs) {
    const PrefillResult& a = sliced.at(s.id).result;
    const PrefillResult& b = whole.at(s.id).result;
    EXPECT_EQ(b.token, a.token) << "request " << s.id;
    EXPECT_EQ(b.logprob, a.logprob) << "request " << s.id;
    EXPECT_EQ(b.compressed_bytes, a.compressed_bytes) << "request " << s.id;
    EXPECT_EQ(whole.at(s.id).order, size_t(s.id - 1)) << "whole prefills answer in order";
  }
  // Round robin over chunks of 64: the 300-token prompt (5 chunks) ends before the
  // 1500-token one (24 chunks) sent ahead of it.
  EXPECT_LT(sliced.at(3).order, sliced.at(1).order);
  EXPECT_LT(sliced.at(4).order, sliced.at(1).order);
  EXPECT_LT(sliced.at(4).order, sliced.at(5).order);  // full-mode prompts one after another
  EXPECT_LT(sliced.at(5).order, sliced.at(6).order);
  // Each prompt's seconds are its own slices': they never overlap, so they add up to
  // no more than the run.
  double sum = 0;
  for (const auto& [id, a] : sliced) sum += a.result.seconds;
  EXPECT_LE(sum, wall);
}

TEST(drafter_sliced_prefill, a_full_mode_prompt_waiting_behind_a_released_one_starts) {
  Rig rig;
  auto batcher = std::make_shared<DraftBatcher>(rig.model, &rig.tier, 16384, DType::bf16, 1);
  {
    caf::scoped_actor sched{*rig.sys};
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace, true);
    sched->send(drafter, prefill_msg{spec(1, 2000, DecodeMode::full)});
    sched->send(drafter, prefill_msg{spec(2, 100, DecodeMode::full)});  // waits for the first
    sched->send(drafter, release_msg{1});
    std::vector<uint64_t> answered;
    sched->receive([&](prefilled_msg& m) { answered.push_back(m.result.id); },
                   [&](failed_msg& m) { ADD_FAILURE() << "request " << m.id << ": " << m.error; },
                   caf::after(std::chrono::seconds(30)) >> [] { ADD_FAILURE() << "the waiting prompt never started"; });
    EXPECT_EQ(std::vector<uint64_t>{2}, answered);
    sched->send(drafter, release_msg{2});
    sched->send_exit(drafter, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();  // the drafter is done
  EXPECT_EQ(0u, batcher->requests()) << "the released prompt left nothing behind";
}

}  // namespace
}  // namespace vc::actors

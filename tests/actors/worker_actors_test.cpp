// The worker actors on their own, driven by a caf::scoped_actor that plays the
// scheduler: the drafter answers prefill and draft messages, the mover streams and
// commits, the verifier runs a pass through the mover.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/protocol.hpp"
#include "actors/workers.hpp"
#include "kvtiers/full_tier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc::actors {
namespace {

struct Rig {
  std::shared_ptr<const Model> model = test::tinycode();
  HostFullTier tier{model->kv_config(16, DType::bf16)};
  std::shared_ptr<TraceRecorder> trace = std::make_shared<TraceRecorder>(true);
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  Rig() {
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

DraftSpec spec(uint64_t id, size_t n) {
  std::mt19937 rng{uint32_t(id)};
  DraftSpec s;
  s.id = id;
  s.prompt = test::random_tokens(rng, n, 2048, 2046);
  s.mode = DecodeMode::vericache;
  s.compressor = "snapkv";
  s.max_new_tokens = 64;
  return s;
}

TEST(worker_actors, drafter_prefills_drafts_and_verifier_checks_through_the_mover) {
  Rig rig;
  {
    caf::scoped_actor sched{*rig.sys};
    auto batcher = std::make_shared<DraftBatcher>(rig.model, &rig.tier, 4096, DType::bf16, 1);
    auto streamer = std::make_shared<LayerStreamer>(rig.tier);
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace);
    auto mover = rig.sys->spawn<caf::detached>(actors::mover, &rig.tier, streamer, rig.trace);
    auto verifier = rig.sys->spawn<caf::detached>(
        actors::verifier, std::make_shared<Verifier>(rig.model, 1), mover, caf::actor{sched}, rig.trace);

    sched->send(drafter, prefill_msg{spec(7, 120)});
    PrefillResult pre;
    sched->receive([&](prefilled_msg& m) { pre = m.result; },
                   caf::after(std::chrono::seconds(30)) >> [] { FAIL() << "no prefill answer"; });
    EXPECT_EQ(pre.id, 7u);
    EXPECT_EQ(rig.tier.length(7), 120u) << "the prompt's full KV is in the full tier";

    sched->send(drafter, draft_msg{7, 6});
    DraftBlock blk;
    sched->receive([&](drafted_msg& m) { blk = std::move(m.block); },
                   caf::after(std::chrono::seconds(30)) >> [] { FAIL() << "no drafts"; });
    ASSERT_EQ(blk.tokens.size(), 6u);
    EXPECT_FALSE(blk.final);

    sched->send(verifier, verify_msg{VerifyJob{7, pre.token, 120, blk.tokens, SamplingParams{}}});
    std::shared_ptr<const VerifyOutcome> out;
    sched->receive([&](verified_msg& m) { out = m.outcome; },
                   [&](failed_msg& m) { FAIL() << m.error; },
                   caf::after(std::chrono::seconds(30)) >> [] { FAIL() << "no verify answer"; });
    ASSERT_TRUE(out);
    EXPECT_EQ(out->tokens.size(), out->accepted + 1);
    // The mover committed the verified positions (t0 and the accepted drafts).
    for (int i = 0; i < 200 && rig.tier.length(7) < 121 + out->accepted; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(rig.tier.length(7), 121 + out->accepted);

    sched->send(drafter, release_msg{7});
    sched->send(mover, release_msg{7});
    for (int i = 0; i < 200 && rig.tier.contains(7); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_FALSE(rig.tier.contains(7));
    for (auto* a : {&drafter, &mover, &verifier}) sched->send_exit(*a, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();  // every handle is gone: the system ends without hanging
}

TEST(worker_actors, a_bad_prefill_is_answered_with_a_failure_for_that_request) {
  Rig rig;
  {
    caf::scoped_actor sched{*rig.sys};
    auto batcher = std::make_shared<DraftBatcher>(rig.model, &rig.tier, 4096, DType::bf16, 1);
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace);
    DraftSpec s = spec(3, 50);
    s.compressor = "no_such_method";
    sched->send(drafter, prefill_msg{s});
    std::string error;
    sched->receive([&](failed_msg& m) { error = m.error; },
                   caf::after(std::chrono::seconds(30)) >> [] { FAIL() << "no answer"; });
    EXPECT_NE(error.find("no_such_method"), std::string::npos) << error;
    EXPECT_FALSE(rig.tier.contains(3));
    sched->send_exit(drafter, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();
}

}  // namespace
}  // namespace vc::actors

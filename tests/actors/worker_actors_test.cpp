// The worker actors on their own, driven by a caf::scoped_actor that plays the
// scheduler: the drafter answers prefill and draft messages, the mover streams and
// commits, the verifier runs a pass through the mover.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/protocol.hpp"
#include "actors/workers.hpp"
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "kvtiers/full_tier.hpp"
#include "runtime/streamed_prefill.hpp"
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
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace, true);
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
    auto drafter = rig.sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{sched}, rig.trace, true);
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

// Verify jobs of requests whose prompts' KV is in the rig's tier: request id's
// prompt has `n` tokens; t0 and drafts are arbitrary tokens (the verifier decides).
std::vector<VerifyJob> jobs_in_tier(Rig& rig, const std::vector<std::pair<uint64_t, size_t>>& reqs) {
  std::vector<VerifyJob> jobs;
  for (const auto& [id, n] : reqs) {
    const DraftSpec s = spec(id, n);
    PagedKvCache scratch(rig.model->kv_config(16, DType::bf16));
    LayerStreamer stream(rig.tier, 256);
    Workspace ws(1);
    rig.tier.create(id);
    (void)prefill_to_tier(*rig.model, s.prompt, id, rig.tier, stream, scratch, ws, 256);
    std::mt19937 rng{uint32_t(id)};
    VerifyJob j{id, int32_t(rng() % 2000) + 3, n, {}, SamplingParams{}};
    for (size_t i = 0; i < 2 + id % 5; ++i) j.drafts.push_back(int32_t(rng() % 2000) + 3);
    jobs.push_back(j);
  }
  return jobs;
}

// The "verify pass" slices of the rig's trace: requests per pass.
std::vector<size_t> requests_per_verify_pass(const Rig& rig) {
  const auto path = std::filesystem::temp_directory_path() / "vc_worker_actors_trace.json";
  rig.trace->write_chrome_trace(path.string());
  std::ifstream in(path);
  const nlohmann::json t = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  std::vector<size_t> out;
  for (const auto& e : t["traceEvents"])
    if (e.value("name", "") == "verify pass") out.push_back(size_t(e["args"]["requests"].get<double>()));
  return out;
}

// The verifier group with `lanes` lanes over the rig's tier; lane 0 reads over a
// slow modelled link, so a first pass on it keeps the verifier busy while more
// jobs arrive.
struct VerifyRig {
  caf::actor mover, verifier;
  VerifyRig(Rig& rig, caf::actor sched, size_t lanes) {
    StreamerLanes l;
    for (size_t k = 0; k < lanes; ++k) {
      auto g = std::make_shared<StreamerGroup>();
      g->ranks.push_back(std::make_shared<LayerStreamer>(rig.tier, 256));
      if (k == 0) g->ranks[0]->set_link_bandwidth(4e6);
      l.push_back(std::move(g));
    }
    mover = rig.sys->spawn<caf::detached>(actors::mover_group, std::vector<FullTier*>{&rig.tier}, l,
                                          rig.trace);
    verifier = rig.sys->spawn<caf::detached>(
        actors::verifier_group, std::make_shared<TpVerifier>(std::make_shared<Verifier>(rig.model, 1)),
        mover, sched, rig.trace, lanes);
  }
};

TEST(worker_actors, a_commit_the_tier_refuses_fails_its_request_with_the_tier_s_error) {
  // The mover dropped a failed commit (a full disk): the request failed later, at
  // its next verify pass, as "read past the end".
  Rig rig;
  {
    caf::scoped_actor sched{*rig.sys};
    auto streamer = std::make_shared<LayerStreamer>(rig.tier);
    auto mover = rig.sys->spawn<caf::detached>(actors::mover, &rig.tier, streamer, rig.trace);
    rig.tier.create(5, 64);
    const KvCacheConfig& kv = rig.tier.config();
    auto out = std::make_shared<VerifyOutcome>();
    out->id = 5;
    out->row_floats = kv.kv_heads * kv.head_dim;
    out->rows_k.assign(kv.num_layers * out->row_floats, 0.0f);
    out->rows_v = out->rows_k;
    // Position 3 of an entry that holds none: the tier refuses the write.
    sched->send(mover, commit_msg{out, 3, 0, caf::actor{sched}});
    std::string error;
    uint64_t id = 0;
    sched->receive([&](failed_msg& m) { id = m.id, error = m.error; },
                   caf::after(std::chrono::seconds(30)) >> [] { FAIL() << "no failure reported"; });
    EXPECT_EQ(id, 5u);
    EXPECT_NE(error.find("committing the accepted tokens' KV: "), std::string::npos) << error;
    EXPECT_NE(error.find("leaves a gap"), std::string::npos) << error;
    sched->send_exit(mover, caf::exit_reason::user_shutdown);
  }
}

TEST(worker_actors, verify_jobs_that_wait_share_a_pass_and_each_outcome_is_its_pass_alone) {
  Rig rig;
  {
    caf::scoped_actor sched{*rig.sys};
    const auto jobs = jobs_in_tier(rig, {{1, 600}, {2, 70}, {3, 300}, {4, 130}, {5, 90}});
    std::map<uint64_t, VerifyOutcome> want;
    Verifier alone(rig.model, 1);
    for (const VerifyJob& j : jobs) {
      LayerStreamer s(rig.tier, 256);
      s.start(j.id, j.p0, j.drafts.size() + 1);
      want[j.id] = alone.run(j, s);
    }
    VerifyRig vr(rig, caf::actor{sched}, 3);
    // Request 1's pass (lane 0, slow link) holds the verifier while 2..5 arrive.
    sched->send(vr.verifier, verify_msg{jobs[0]});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (size_t i = 1; i < jobs.size(); ++i) sched->send(vr.verifier, verify_msg{jobs[i]});
    std::map<uint64_t, std::shared_ptr<const VerifyOutcome>> got;
    for (size_t i = 0; i < jobs.size(); ++i)
      sched->receive([&](verified_msg& m) { got[m.outcome->id] = m.outcome; },
                     [&](failed_msg& m) { FAIL() << m.error; },
                     caf::after(std::chrono::seconds(60)) >> [] { FAIL() << "no verify answer"; });
    ASSERT_EQ(got.size(), jobs.size());
    for (const auto& [id, o] : got) {
      EXPECT_EQ(o->tokens, want[id].tokens) << "request " << id;
      EXPECT_EQ(o->logprobs, want[id].logprobs) << "request " << id;
      EXPECT_EQ(o->rows_k, want[id].rows_k) << "request " << id;
    }
    // Jobs that waited shared passes of at most 3 (the lanes): {1, 3, 1} when
    // request 1's pass started before the others came, {3, 2} when all five waited.
    const std::vector<size_t> passes = requests_per_verify_pass(rig);
    EXPECT_EQ(std::accumulate(passes.begin(), passes.end(), size_t(0)), jobs.size());
    EXPECT_LE(*std::max_element(passes.begin(), passes.end()), 3u);
    EXPECT_EQ(*std::max_element(passes.begin(), passes.end()), 3u) << "no pass was shared";
    for (auto* a : {&vr.mover, &vr.verifier}) sched->send_exit(*a, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();
}

TEST(worker_actors, a_request_that_fails_in_a_shared_verify_pass_fails_alone) {
  Rig rig;
  {
    caf::scoped_actor sched{*rig.sys};
    const auto jobs = jobs_in_tier(rig, {{1, 600}, {2, 70}, {3, 300}, {4, 130}});
    rig.tier.release(3);  // cancelled while its verify job waited: its full KV is gone
    VerifyRig vr(rig, caf::actor{sched}, 4);
    for (const VerifyJob& j : jobs) sched->send(vr.verifier, verify_msg{j});
    std::set<uint64_t> verified;
    std::map<uint64_t, std::string> failed;
    for (size_t i = 0; i < jobs.size(); ++i)
      sched->receive([&](verified_msg& m) { verified.insert(m.outcome->id); },
                     [&](failed_msg& m) { failed[m.id] = m.error; },
                     caf::after(std::chrono::seconds(60)) >> [] { FAIL() << "no verify answer"; });
    EXPECT_EQ(verified, (std::set<uint64_t>{1, 2, 4}));
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_NE(failed[3].find("unknown request 3"), std::string::npos) << failed[3];
    // Only passes that succeeded are traced: the shared pass with request 3 failed
    // and its requests ran again one by one, so the traced passes hold the three
    // verified requests ({1, 1, 1}, or {2, 1} when 1 and 2 shared a pass before 3
    // and 4 came).
    const std::vector<size_t> passes = requests_per_verify_pass(rig);
    EXPECT_EQ(std::accumulate(passes.begin(), passes.end(), size_t(0)), 3u);
    for (auto* a : {&vr.mover, &vr.verifier}) sched->send_exit(*a, caf::exit_reason::user_shutdown);
  }
  rig.sys.reset();
}

}  // namespace
}  // namespace vc::actors

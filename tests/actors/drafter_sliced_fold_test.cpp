// A view's rebuild during decoding (a fold) run by the drafter actor a layer per
// slice, with a caf::scoped_actor playing the scheduler and the real mover and
// verifier: a fold whose full-KV read fails fails its request alone, with an error
// naming the rebuild and the file, and another request drafts on; a request released
// in the middle of its fold leaves nothing behind, and the other one drafts on.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "actors/protocol.hpp"
#include "actors/workers.hpp"
#include "kvtiers/full_tier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc::actors {
namespace {

constexpr size_t kPrompt = 900;

DraftSpec spec(uint64_t id) {
  std::mt19937 rng{uint32_t(id)};
  DraftSpec s;
  s.id = id;
  s.prompt = test::random_tokens(rng, kPrompt, 2048, 2046);
  s.mode = DecodeMode::vericache;
  s.compressor = "snapkv";
  s.max_new_tokens = 64;
  s.fold_every = 1;  // a rebuild at the second round's commit
  return s;
}

// The drafter (sliced), mover and verifier over one full tier; the test thread is
// the scheduler.
struct Loop {
  std::shared_ptr<const Model> model = test::tinycode();
  std::unique_ptr<FullTier> tier;
  std::shared_ptr<TraceRecorder> trace = std::make_shared<TraceRecorder>(true);
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> sched;
  std::shared_ptr<DraftBatcher> batcher;
  caf::actor drafter, mover, verifier;
  std::map<uint64_t, std::pair<int32_t, size_t>> next;  // per request: t0, p0

  explicit Loop(std::unique_ptr<FullTier> t) : tier(std::move(t)) {
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = std::make_unique<caf::scoped_actor>(*sys);
    batcher = std::make_shared<DraftBatcher>(model, tier.get(), 8192, DType::bf16, 1);
    auto streamer = std::make_shared<LayerStreamer>(*tier);
    drafter = sys->spawn<caf::detached>(actors::drafter, batcher, caf::actor{*sched}, trace, true);
    mover = sys->spawn<caf::detached>(actors::mover, tier.get(), streamer, trace);
    verifier = sys->spawn<caf::detached>(actors::verifier, std::make_shared<Verifier>(model, 1), mover,
                                         caf::actor{*sched}, trace);
  }
  ~Loop() {
    for (auto* a : {&drafter, &mover, &verifier}) (*sched)->send_exit(*a, caf::exit_reason::user_shutdown);
    drafter = mover = verifier = caf::actor{};
    sched.reset();
    sys.reset();  // every handle is gone: the system ends without hanging
  }

  void prefill(uint64_t id) {
    (*sched)->send(drafter, prefill_msg{spec(id)});
    (*sched)->receive([&](prefilled_msg& m) { next[id] = {m.result.token, kPrompt}; },
                      [&](failed_msg& m) { ADD_FAILURE() << m.error; },
                      caf::after(std::chrono::seconds(60)) >> [] { ADD_FAILURE() << "no prefill answer"; });
  }
  // Drafts n tokens for `id`; empty on a failure (its error in *error).
  DraftBlock draft(uint64_t id, size_t n, std::string* error = nullptr) {
    (*sched)->send(drafter, draft_msg{id, n});
    DraftBlock blk;
    (*sched)->receive([&](drafted_msg& m) { blk = std::move(m.block); },
                      [&](failed_msg& m) {
                        if (error) *error = m.error;
                        else ADD_FAILURE() << m.error;
                      },
                      caf::after(std::chrono::seconds(60)) >> [] { ADD_FAILURE() << "no drafts"; });
    return blk;
  }
  std::shared_ptr<const VerifyOutcome> verify(const DraftBlock& blk) {
    auto [t0, p0] = next.at(blk.id);
    VerifyJob job{blk.id, t0, p0, blk.tokens, SamplingParams{}};
    job.collect_stats = blk.wants_stats;
    (*sched)->send(verifier, verify_msg{job});
    std::shared_ptr<const VerifyOutcome> out;
    (*sched)->receive([&](verified_msg& m) { out = m.outcome; },
                      [&](failed_msg& m) { ADD_FAILURE() << m.error; },
                      caf::after(std::chrono::seconds(60)) >> [] { ADD_FAILURE() << "no verify answer"; });
    return out;
  }
  // The mover writes the round's rows (waited for), then the drafter hears of it.
  void commit_mover(const std::shared_ptr<const VerifyOutcome>& v) {
    auto [t0, p0] = next.at(v->id);
    (*sched)->send(mover, commit_msg{v, p0});
    for (int i = 0; i < 2000 && tier->length(v->id) < p0 + v->accepted + 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(p0 + v->accepted + 1, tier->length(v->id));
    next[v->id] = {v->tokens.back(), p0 + v->accepted + 1};
  }
  void commit_drafter(const std::shared_ptr<const VerifyOutcome>& v, size_t p0) {
    (*sched)->send(drafter, commit_msg{v, p0});
  }
  // One whole round of `id`: draft 4, verify, commit. The commit's p0.
  size_t round(uint64_t id) {
    const size_t p0 = next.at(id).second;
    const DraftBlock blk = draft(id, 4);
    EXPECT_EQ(4u, blk.tokens.size());
    auto v = verify(blk);
    if (!v) return p0;
    commit_mover(v);
    commit_drafter(v, p0);
    return p0;
  }
  // Requests 1 and 2 prefilled and one round each (the views cover the prompts: no
  // fold yet); then request 1's second round drafted, verified and written by the
  // mover, its commit due to make a view's rebuild due. Returns it and its p0 (the
  // caller sends commit_drafter).
  std::pair<std::shared_ptr<const VerifyOutcome>, size_t> up_to_a_due_fold() {
    prefill(1);
    prefill(2);
    round(1);
    round(2);
    const size_t p0 = next.at(1).second;
    const DraftBlock blk = draft(1, 4);
    EXPECT_TRUE(blk.wants_stats) << "the rebuild is due at this round's commit";
    auto v = verify(blk);
    if (v) commit_mover(v);
    return {v, p0};
  }
  // Request `id`'s "fold" slices in the trace so far.
  size_t fold_slices(uint64_t id) const {
    const auto path = std::filesystem::temp_directory_path() /
                      ("vc_drafter_fold_trace_" + std::to_string(::getpid()) + ".json");
    trace->write_chrome_trace(path.string());
    std::ifstream in(path);
    const nlohmann::json t = nlohmann::json::parse(in);
    std::filesystem::remove(path);
    size_t n = 0;
    for (const auto& e : t["traceEvents"])
      n += e.value("name", "") == "fold" && e.contains("args") && e["args"]["request"].is_number() &&
           e["args"]["request"].get<uint64_t>() == id;
    return n;
  }
};

TEST(drafter_sliced_fold, a_fold_whose_full_kv_read_fails_fails_its_request_alone_naming_the_rebuild) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vericache-drafter-fold-fail-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  struct RemoveAfter {
    std::filesystem::path p;
    ~RemoveAfter() { std::filesystem::remove_all(p); }
  } remove_after{dir};
  const auto model = test::tinycode();
  Loop loop(std::make_unique<DiskFullTier>(model->kv_config(16, DType::bf16), dir.string()));
  // Request 1's second commit makes a rebuild due, which reads the prompt's KV back
  // from the disk tier; its file goes first.
  const auto [v, p0] = loop.up_to_a_due_fold();
  ASSERT_TRUE(v);
  size_t removed = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().filename().string() == "req-1.kv") {
      std::filesystem::remove(e.path());
      ++removed;
      break;
    }
  ASSERT_EQ(1u, removed);
  loop.commit_drafter(v, p0);
  std::string error;
  (*loop.sched)->receive([&](failed_msg& m) {
                           EXPECT_EQ(1u, m.id);
                           error = m.error;
                         },
                         caf::after(std::chrono::seconds(60)) >> [] { ADD_FAILURE() << "no failure"; });
  EXPECT_NE(error.find("view rebuild"), std::string::npos) << error;
  EXPECT_NE(error.find("req-1.kv"), std::string::npos) << error;
  EXPECT_GE(loop.fold_slices(1), 1u) << "it failed inside the sliced fold";
  // The scheduler releases a failed request; the other one drafts on.
  (*loop.sched)->send(loop.drafter, release_msg{1});
  (*loop.sched)->send(loop.mover, release_msg{1});
  loop.round(2);
  EXPECT_EQ(4u, loop.draft(2, 4).tokens.size());
  EXPECT_EQ(1u, loop.batcher->requests()) << "request 1 is gone from the drafter";
}

TEST(drafter_sliced_fold, a_request_released_in_the_middle_of_its_fold_leaves_nothing_and_the_other_drafts_on) {
  // Each attempt releases request 1 as soon as its fold starts; a fold is several
  // slices (a layer each), so the release lands before its end unless this thread
  // is held up for all of them: at least one of three attempts must cut one short.
  const size_t per_fold = size_t(test::tinycode()->config().num_layers) + 1;  // SnapKV
  size_t cut_short = 0;
  for (int attempt = 0; attempt < 3 && cut_short == 0; ++attempt) {
    const auto model = test::tinycode();
    Loop loop(std::make_unique<HostFullTier>(model->kv_config(16, DType::bf16)));
    const auto [v, p0] = loop.up_to_a_due_fold();
    ASSERT_TRUE(v);
    loop.commit_drafter(v, p0);
    (*loop.sched)->send(loop.drafter, release_msg{1});
    (*loop.sched)->send(loop.mover, release_msg{1});
    // The other request drafts on; by its answer the release has been handled.
    loop.round(2);
    EXPECT_EQ(4u, loop.draft(2, 4).tokens.size());
    const size_t slices = loop.fold_slices(1);
    EXPECT_GE(slices, 1u) << "the fold started";
    EXPECT_LE(slices, per_fold);
    cut_short += slices < per_fold;
    EXPECT_EQ(1u, loop.batcher->requests()) << "request 1 is gone from the drafter";
    for (int i = 0; i < 2000 && loop.tier->contains(1); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_FALSE(loop.tier->contains(1)) << "and from the full tier";
    (*loop.sched)->receive([&](failed_msg& m) { ADD_FAILURE() << "request " << m.id << ": " << m.error; },
                           caf::after(std::chrono::milliseconds(50)) >> [] {});
  }
  EXPECT_EQ(1u, cut_short) << "no release landed in the middle of a fold";
}

}  // namespace
}  // namespace vc::actors

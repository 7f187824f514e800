// The drafter prefills a prompt a chunk at a time (EngineConfig::slice_prefill): a
// request already decoding takes its steps between the chunks of a long prompt
// arriving after it, both give full decoding's tokens, and a request cancelled in
// the middle of its prefill leaves nothing behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>

#include <vericache/engine.hpp>

#include "runtime/generator.hpp"
#include "tests/actors/engine_trace.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;

constexpr size_t kLongPrompt = 3000;  // 12 chunks of 256

EngineConfig config(bool slice) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.trace = true;
  c.slice_prefill = slice;
  return c;
}

Request request(uint32_t seed, size_t prompt_tokens, int max_tokens, const char* mode) {
  std::mt19937 rng(seed);
  const auto& cfg = vc::test::tinycode()->config();
  Request r;
  r.prompt_ids = vc::test::random_tokens(rng, prompt_tokens, cfg.vocab_size, cfg.bos_token_id);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.mode = mode;
  r.compressor = "snapkv";
  r.draft = "8";
  return r;
}

// Plain full-KV decoding of `r`, alone.
std::vector<int32_t> full_decoding(const Request& r) {
  vc::GeneratorConfig gc;
  gc.max_context = 4096;
  vc::Generator gen(vc::test::tinycode(), vc::test::tinycode_tokenizer(), gc);
  vc::GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.stop_at_eos = false;
  return gen.generate(r.prompt_ids, o).output_ids;
}

// A full-mode request decoding, then a long vericache prompt submitted once its
// first token is out.
struct Pair {
  vericache::Result decoding, long_one;
  vc::test::PrefillWindow window;
};

Pair run_pair(bool slice, const Request& decoding, const Request& long_one) {
  Engine engine(config(slice));
  std::promise<void> first;
  bool once = false;
  auto a = engine.submit(decoding, [&](uint64_t, int32_t) {
    if (!once) {
      once = true;
      first.set_value();
    }
  });
  if (first.get_future().wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    ADD_FAILURE() << "the decoding request has no first token";
    return {};
  }
  auto b = engine.submit(long_one);
  Pair p;
  p.decoding = a.result.get();
  p.long_one = b.result.get();
  p.window = vc::test::prefill_window(vc::test::engine_trace(engine), a.id, b.id);
  return p;
}

TEST(engine_sliced_prefill, a_decoding_request_steps_between_the_chunks_of_a_long_prompt_and_both_match_full_decoding) {
  const Request decoding = request(7, 40, 400, "full");
  const Request long_one = request(8, kLongPrompt, 12, "vericache");
  const Pair p = run_pair(true, decoding, long_one);
  ASSERT_TRUE(p.decoding.ok) << p.decoding.error;
  ASSERT_TRUE(p.long_one.ok) << p.long_one.error;
  EXPECT_EQ(full_decoding(decoding), p.decoding.output_ids);
  EXPECT_EQ(full_decoding(long_one), p.long_one.output_ids);
  // One slice per chunk (and one before the first), with the other's steps between.
  EXPECT_GE(p.window.prefill_slices, kLongPrompt / 256);
  EXPECT_GE(p.window.steps_inside, 4u);
}

TEST(engine_sliced_prefill, without_slicing_a_long_prompt_is_prefilled_in_one_piece_with_the_same_tokens) {
  const Request decoding = request(7, 40, 400, "full");
  const Request long_one = request(8, kLongPrompt, 12, "vericache");
  const Pair p = run_pair(false, decoding, long_one);
  ASSERT_TRUE(p.decoding.ok) << p.decoding.error;
  ASSERT_TRUE(p.long_one.ok) << p.long_one.error;
  EXPECT_EQ(full_decoding(decoding), p.decoding.output_ids);
  EXPECT_EQ(full_decoding(long_one), p.long_one.output_ids);
  EXPECT_EQ(1u, p.window.prefill_slices);
  EXPECT_EQ(0u, p.window.steps_inside);
}

TEST(engine_sliced_prefill, a_request_cancelled_during_its_prefill_leaves_nothing_held_and_the_next_matches_full_decoding) {
  const Request long_one = request(9, kLongPrompt, 8, "vericache");
  Engine engine(config(true));
  size_t cancelled = 0;
  for (int wait_ms : {-1, 0, 2, 10, 30}) {
    auto sub = engine.submit(long_one);
    if (wait_ms < 0) {  // once its prefill has written its first chunk to the full tier
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (engine.stats().full_tier_bytes_held == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    }
    engine.cancel(sub.id);
    const auto r = sub.result.get();
    EXPECT_TRUE(r.finish_reason == "cancelled" || r.ok) << r.error;
    cancelled += r.finish_reason == "cancelled" && r.output_ids.empty();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((engine.stats().full_tier_bytes_held > 0 || engine.stats().fast_memory_used > 0) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(0u, engine.stats().full_tier_bytes_held) << "cancelled after " << wait_ms << " ms";
    EXPECT_EQ(0u, engine.stats().fast_memory_used) << "cancelled after " << wait_ms << " ms";
  }
  EXPECT_GE(cancelled, 1u) << "no request was cancelled before its first token";
  const auto r = engine.submit(long_one).result.get();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(full_decoding(long_one), r.output_ids);
}

// A view's rebuild during decoding (a fold) runs a layer per slice when slicing is
// on: another request's draft steps fall between the slices of one fold, its own
// request takes none, and the drafts and rounds are those of the fold run whole.
// `per_fold`: the slices of one fold (the compressor's layer reads, and one more
// before the first).
void expect_sliced_folds(const Request& folding, size_t per_fold) {
  // Long enough to be decoding still while the folds run, on a loaded machine too
  // (600 tokens once ended before the first fold in CI).
  const Request decoding = request(22, 40, 2000, "full");
  std::vector<vericache::Result> folded;  // sliced, then whole
  std::vector<size_t> fold_slices;
  for (bool slice : {true, false}) {
    Engine engine(config(slice));
    auto a = engine.submit(folding);
    auto b = engine.submit(decoding);
    const auto ra = a.result.get();
    const auto rb = b.result.get();
    ASSERT_TRUE(ra.ok) << ra.error;
    ASSERT_TRUE(rb.ok) << rb.error;
    EXPECT_EQ(full_decoding(folding), ra.output_ids) << "slice " << slice;
    EXPECT_EQ(full_decoding(decoding), rb.output_ids) << "slice " << slice;
    folded.push_back(ra);
    const auto w = vc::test::fold_windows(vc::test::engine_trace(engine), a.id, b.id, slice ? per_fold : 1);
    fold_slices.push_back(w.slices);
    if (slice) vc::test::expect_folds_sliced(w, per_fold);  // whole: one slice per fold, in its commit
  }
  // The same folds, drafts and rounds either way.
  EXPECT_EQ(fold_slices[0], fold_slices[1] * per_fold) << "each fold: " << per_fold << " slices, or one";
  EXPECT_EQ(folded[0].stats.rounds, folded[1].stats.rounds);
  EXPECT_EQ(folded[0].stats.drafted, folded[1].stats.drafted);
  EXPECT_EQ(folded[0].stats.accepted, folded[1].stats.accepted);
}

TEST(engine_sliced_prefill, a_views_rebuild_runs_a_layer_per_slice_with_the_other_requests_steps_between) {
  Request folding = request(21, 1500, 48, "vericache");
  folding.fold_every = 8;  // a rebuild every 8 verified tokens
  expect_sliced_folds(folding, size_t(vc::test::tinycode()->config().num_layers) + 1);
}

// KVzap rebuilds from the scores logged as tokens were verified: its folds read the
// full KV a layer per slice too, with the same drafts and rounds as run whole.
TEST(engine_sliced_prefill, a_kvzap_views_rebuild_runs_a_layer_per_slice_with_the_same_rounds_as_whole) {
  Request folding = request(23, 1500, 48, "vericache");
  folding.compressor = "kvzap";
  folding.fold_every = 8;
  expect_sliced_folds(folding, size_t(vc::test::tinycode()->config().num_layers) + 1);
}

}  // namespace

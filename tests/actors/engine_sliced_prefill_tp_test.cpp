// Sliced prefill at tensor-parallel degree 2: every rank's prefill runs on a task of
// its own and all of them yield before the same chunk, so a request decoding on the
// group takes its steps between a long prompt's chunks; both give the group's full
// decoding; a view's rebuild runs a layer per slice on every rank; a cancelled
// prefill leaves nothing on any rank; and a rank failing in the middle of a prefill
// fails that request alone with its own error.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <vericache/engine.hpp>

#include "runtime/tp_generator.hpp"
#include "tests/actors/engine_trace.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;

constexpr size_t kLongPrompt = 3000;  // 12 chunks of 256
constexpr int kDegree = 2;

EngineConfig config() {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.tp = kDegree;
  c.trace = true;
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

// Full-KV decoding of `r` alone, by the group of the same degree.
std::vector<int32_t> full_decoding(const Request& r) {
  vc::GeneratorConfig gc;
  gc.max_context = 4096;
  vc::TpGenerator gen(vc::test::tinycode(), vc::test::tinycode_tokenizer(), kDegree, gc);
  vc::GenerateOptions o;
  o.mode = vc::DecodeMode::full;
  o.max_tokens = r.max_tokens;
  o.stop_at_eos = false;
  return gen.generate(r.prompt_ids, o).output_ids;
}

// Request `id`'s prefill slices in `trace`.
size_t prefill_slices(const nlohmann::json& trace, uint64_t id) {
  return vc::test::count_slices(trace, "prefill", id);
}

// Submits x then y to `engine`, waits for both and checks each gives the group's
// full decoding; their ids.
std::pair<uint64_t, uint64_t> run_pair_as_full_decoding(Engine& engine, const Request& x, const Request& y) {
  auto a = engine.submit(x);
  auto b = engine.submit(y);
  const auto ra = a.result.get();
  const auto rb = b.result.get();
  EXPECT_TRUE(ra.ok) << ra.error;
  EXPECT_TRUE(rb.ok) << rb.error;
  EXPECT_EQ(full_decoding(x), ra.output_ids);
  EXPECT_EQ(full_decoding(y), rb.output_ids);
  return {a.id, b.id};
}

// Waits (at most 10 s) until the engine holds no full-tier bytes and no fast memory.
void expect_nothing_held(Engine& engine, const std::string& when) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((engine.stats().full_tier_bytes_held > 0 || engine.stats().fast_memory_used > 0) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(0u, engine.stats().full_tier_bytes_held) << when;
  EXPECT_EQ(0u, engine.stats().fast_memory_used) << when;
}

// Waits (at most 30 s) until a prefill has written to the full tier.
void wait_for_full_tier_bytes(Engine& engine) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.stats().full_tier_bytes_held == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(engine_sliced_prefill_tp, at_two_ranks_a_decoding_request_steps_between_a_long_prompts_chunks_and_both_match_full_decoding) {
  const Request decoding = request(7, 40, 400, "full");
  const Request long_one = request(8, kLongPrompt, 12, "vericache");
  Engine engine(config());
  std::promise<void> first;
  std::atomic<bool> once{false};
  auto a = engine.submit(decoding, [&](uint64_t, int32_t) {
    if (!once.exchange(true)) first.set_value();
  });
  ASSERT_EQ(std::future_status::ready, first.get_future().wait_for(std::chrono::seconds(120)))
      << "the decoding request has no first token";
  auto b = engine.submit(long_one);
  const auto ra = a.result.get();
  const auto rb = b.result.get();
  ASSERT_TRUE(ra.ok) << ra.error;
  ASSERT_TRUE(rb.ok) << rb.error;
  EXPECT_EQ(full_decoding(decoding), ra.output_ids);
  EXPECT_EQ(full_decoding(long_one), rb.output_ids);
  const auto w = vc::test::prefill_window(vc::test::engine_trace(engine), a.id, b.id);
  EXPECT_GE(w.prefill_slices, kLongPrompt / 256 + 1) << "one slice per chunk (and one before the first)";
  EXPECT_GE(w.steps_inside, 4u) << "the decoding request's steps between the chunks";
}

TEST(engine_sliced_prefill_tp, at_two_ranks_a_model_wide_compressor_yields_at_the_same_layers_and_matches_full_decoding) {
  // LaProx ranks tokens model-wide and reads each layer back twice while it builds
  // the view: every rank yields (and meets the others) before each of those reads.
  Request long_one = request(14, 1200, 12, "vericache");
  long_one.compressor = "laprox";
  const Request decoding = request(15, 40, 200, "full");
  Engine engine(config());
  const auto [a, b] = run_pair_as_full_decoding(engine, decoding, long_one);
  const size_t layers = size_t(vc::test::tinycode()->config().num_layers);
  EXPECT_EQ(prefill_slices(vc::test::engine_trace(engine), b), (1200 + 255) / 256 + 2 * layers + 1)
      << "one slice before each chunk and each of the view's 2 x layers reads, one to the end";
}

TEST(engine_sliced_prefill_tp, at_two_ranks_a_views_rebuild_runs_a_layer_per_slice_with_the_other_requests_steps_between) {
  // Every rank rebuilds its heads' view on a task of its own; the ranks yield (and
  // meet) before the same layer, and the other request's steps fall between.
  Request folding = request(16, 1500, 48, "vericache");
  folding.fold_every = 8;
  const Request decoding = request(17, 40, 600, "full");
  Engine engine(config());
  const auto [a, b] = run_pair_as_full_decoding(engine, folding, decoding);
  const size_t per_fold = size_t(vc::test::tinycode()->config().num_layers) + 1;  // SnapKV
  vc::test::expect_folds_sliced(vc::test::fold_windows(vc::test::engine_trace(engine), a, b, per_fold), per_fold);
}

TEST(engine_sliced_prefill_tp, at_two_ranks_a_request_cancelled_during_its_prefill_leaves_nothing_on_any_rank) {
  const Request long_one = request(9, kLongPrompt, 8, "vericache");
  Engine engine(config());
  size_t cancelled = 0;
  std::vector<uint64_t> cancelled_ids;
  for (int wait_ms : {-1, 0, 2, 10, 30}) {
    auto sub = engine.submit(long_one);
    if (wait_ms < 0)
      wait_for_full_tier_bytes(engine);  // once the prefill has written its first chunk
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    engine.cancel(sub.id);
    const auto r = sub.result.get();
    EXPECT_TRUE(r.finish_reason == "cancelled" || r.ok) << r.error;
    if (r.finish_reason == "cancelled" && r.output_ids.empty()) {
      ++cancelled;
      cancelled_ids.push_back(sub.id);
    }
    expect_nothing_held(engine, "cancelled after " + std::to_string(wait_ms) + " ms");
  }
  EXPECT_GE(cancelled, 1u) << "no request was cancelled before its first token";
  // At least one was cancelled between its chunks: some slices ran, not all 13.
  const auto trace = vc::test::engine_trace(engine);
  size_t mid = 0;
  for (uint64_t id : cancelled_ids) {
    const size_t n = prefill_slices(trace, id);
    // of 13 + layers: one before each of 12 chunks and each layer of the view, one after
    mid += n > 1 && n <= (kLongPrompt + 255) / 256 + size_t(vc::test::tinycode()->config().num_layers);
  }
  EXPECT_GE(mid, 1u) << "no prefill was cancelled between two of its chunks";
  const auto r = engine.submit(long_one).result.get();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(full_decoding(long_one), r.output_ids);
}

TEST(engine_sliced_prefill_tp, a_rank_failing_in_the_middle_of_a_sliced_prefill_fails_that_request_alone_with_its_own_error) {
  // Disk tiers, one per rank. Once the long prompt's prefill has written its first
  // chunk, ONE rank's file of it goes behind its tier's back: that rank's next read
  // (compression reads the prompt's KV back) fails, the other rank, in a collective
  // or yielded before a chunk, stops too, and nothing of the request is left.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vericache-sliced-prefill-tp-fail-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  struct RemoveAfter {
    std::filesystem::path p;
    ~RemoveAfter() { std::filesystem::remove_all(p); }
  } remove_after{dir};
  EngineConfig cfg = config();
  cfg.full_tier = "disk";
  cfg.disk_dir = dir.string();
  Engine engine(cfg);
  const Request decoding = request(11, 40, 200, "full");
  auto a = engine.submit(decoding);
  const Request victim = request(12, kLongPrompt, 8, "vericache");
  auto v = engine.submit(victim);
  wait_for_full_tier_bytes(engine);
  size_t removed = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().filename().string() == "req-" + std::to_string(v.id) + ".kv") {
      std::filesystem::remove(e.path());
      ++removed;
      break;  // one rank only
    }
  EXPECT_EQ(1u, removed);
  const auto rv = v.result.get();
  EXPECT_FALSE(rv.ok);
  EXPECT_TRUE(rv.output_ids.empty()) << "failed during its prefill, before a first token";
  EXPECT_NE(rv.error.find(".kv"), std::string::npos) << rv.error;
  EXPECT_EQ(rv.error.find("tensor parallelism: rank"), std::string::npos)
      << "the failing rank's own error, not the abort the other rank saw: " << rv.error;
  const auto ra = a.result.get();
  ASSERT_TRUE(ra.ok) << ra.error;
  EXPECT_EQ(full_decoding(decoding), ra.output_ids);
  expect_nothing_held(engine, "after the failed prefill");
  const Request later = request(13, 600, 16, "vericache");
  const auto rl = engine.submit(later).result.get();
  ASSERT_TRUE(rl.ok) << rl.error;
  EXPECT_EQ(full_decoding(later), rl.output_ids);
}

}  // namespace

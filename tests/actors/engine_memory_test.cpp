// Admission by memory through the public API: under a fast-memory budget that holds
// a few requests, many long requests all complete, one after another as memory
// frees, with the output of full decoding; the budget is never exceeded; a request
// that could never fit fails alone, naming the sizes.
#include <gtest/gtest.h>

// GCC 12 at -O3 reports a false -Wrestrict in std::string assignment inlined here
// (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

#include <random>
#include <string>
#include <vector>

#include <vericache/engine.hpp>

#include "runtime/fast_memory_need.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;

struct Case {
  vericache::Request req;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

// n requests of 1000-1500 tokens, 12 new tokens each, expected: full decoding alone.
std::vector<Case> long_cases(size_t n, const std::string& mode, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto model = vc::test::tinycode();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
  std::vector<Case> cases(n);
  for (auto& c : cases) {
    c.req.prompt_ids = vc::test::random_tokens(rng, 1000 + rng() % 500, model->config().vocab_size,
                                               model->config().bos_token_id);
    c.req.max_tokens = 12;
    c.req.mode = mode;
    c.req.compressor = "snapkv";
    c.req.ratio = 4;
    c.req.draft = "8";
    c.req.ignore_eos = true;
    vc::GenerateOptions o;
    o.max_tokens = c.req.max_tokens;
    o.stop_at_eos = false;
    const auto r = gen.generate(c.req.prompt_ids, o);
    c.ids = r.output_ids;
    c.logprobs = r.output_logprobs;
  }
  return cases;
}

// The bound admission reserves for a case (what the engine computes at submit).
size_t need_of(const Case& c, const vc::KvCacheConfig& kv) {
  vc::DraftSpec s;
  s.prompt = c.req.prompt_ids;
  s.mode = vc::parse_decode_mode(c.req.mode);
  s.compressor = c.req.compressor;
  s.ratio = c.req.ratio;
  s.max_new_tokens = size_t(c.req.max_tokens);
  s.fold_every = c.req.fold_every;
  return vc::fast_memory_need(s, kv, 8).total();
}

void run_under_budget(const std::string& mode, size_t n, size_t fit) {
  const auto cases = long_cases(n, mode, mode[0] == 'f' ? 11 : 12);
  const vc::KvCacheConfig kv = vc::test::tinycode()->kv_config(16, vc::DType::bf16);
  size_t largest = 0;
  for (const auto& c : cases) largest = std::max(largest, need_of(c, kv));
  EngineConfig cfg;
  cfg.model_dir = VC_MODEL_DIR;
  cfg.max_active = n;  // only memory limits concurrency
  cfg.fast_memory_bytes = fit * largest + vc::engine_fast_overhead(kv, cfg.stage_positions, cfg.verify_batch);
  Engine engine(cfg);
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  size_t waited = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << "request " << i << ": " << r.error;
    EXPECT_EQ(r.output_ids, cases[i].ids) << mode << " request " << i;
    EXPECT_EQ(r.output_logprobs, cases[i].logprobs) << mode << " request " << i;
    EXPECT_LE(r.stats.fast_bytes_peak, r.stats.fast_bytes_reserved) << "request " << i;
    waited += r.stats.queue_seconds > 0.05 ? 1 : 0;
  }
  const auto s = engine.stats();
  EXPECT_EQ(s.completed, n);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_LE(s.fast_memory_peak, s.fast_memory_budget);
  EXPECT_GT(waited, n / 2) << "most requests should have waited for memory";
  EXPECT_EQ(s.fast_memory_reserved, 0u);
}

TEST(engine_memory, twenty_four_long_full_requests_under_a_budget_for_four_all_complete_exactly) {
  run_under_budget("full", 24, 4);
}

TEST(engine_memory, long_vericache_requests_wait_for_memory_and_match_full_decoding) {
  run_under_budget("vericache", 12, 3);
}

TEST(engine_memory, quantized_views_with_bits_set_by_hand_stay_within_what_admission_reserved) {
  // KIVI told to keep 16-bit keys and values stores the whole KV at a "ratio" of 4:
  // admission must reserve what the view really takes (the quantizer's own bound),
  // or the request overruns its reservation and the budget runs out mid-request.
  // Views rebuilt every 4 verified tokens: the reservation covers the largest.
  auto cases = long_cases(3, "vericache", 41);
  const vc::KvCacheConfig kv = vc::test::tinycode()->kv_config(16, vc::DType::bf16);
  size_t largest = 0;
  for (auto& c : cases) {
    c.req.compressor = "kivi";
    c.req.fold_every = 4;
    largest = std::max(largest, need_of(c, kv));  // the bound without the parameters
    c.req.compressor_params = {{"key_bits", 16}, {"value_bits", 16}};
  }
  EngineConfig cfg;
  cfg.model_dir = VC_MODEL_DIR;
  cfg.max_active = cases.size();
  // Room for four by the bound of a 4x view; for one at a time by their real views.
  cfg.fast_memory_bytes =
      4 * largest + vc::engine_fast_overhead(kv, cfg.stage_positions, cfg.verify_batch);
  Engine engine(cfg);
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << "request " << i << ": " << r.error;
    EXPECT_EQ(r.output_ids, cases[i].ids) << "request " << i;
    EXPECT_LE(r.stats.fast_bytes_peak, r.stats.fast_bytes_reserved) << "request " << i;
    EXPECT_GT(r.stats.fast_bytes_reserved, largest) << "the view at 16 bits is reserved whole";
  }
  const auto s = engine.stats();
  EXPECT_LE(s.fast_memory_peak, s.fast_memory_budget);
  EXPECT_EQ(s.failed, 0u);
  // At the ratio's own bits the bound is the view's exact size (plus positions and
  // the tail), and still covers the peak of views rebuilt as the requests grow.
  // KVQuant's views also hold absolute positions (keys stored before RoPE); a
  // composition's kept rows are fewer than the positions its bound counts.
  for (const char* method : {"kivi", "kvquant", "snapkv+kivi"}) {
    for (auto& c : cases) {
      c.req.compressor = method;
      c.req.compressor_params.clear();
    }
    subs.clear();
    for (const auto& c : cases) subs.push_back(engine.submit(c.req));
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto r = subs[i].result.get();
      ASSERT_TRUE(r.ok) << method << " request " << i << ": " << r.error;
      EXPECT_EQ(r.output_ids, cases[i].ids) << method << " request " << i;
      EXPECT_LE(r.stats.fast_bytes_peak, r.stats.fast_bytes_reserved) << method << " request " << i;
    }
  }
}

TEST(engine_memory, a_request_that_could_never_fit_fails_naming_the_sizes_and_others_run) {
  EngineConfig cfg;
  cfg.model_dir = VC_MODEL_DIR;
  const vc::KvCacheConfig kv = vc::test::tinycode()->kv_config(16, vc::DType::bf16);
  cfg.fast_memory_bytes = 600 * 3072 + vc::engine_fast_overhead(kv, cfg.stage_positions, cfg.verify_batch);
  Engine engine(cfg);
  std::mt19937 rng(5);
  vericache::Request big;
  big.prompt_ids = vc::test::random_tokens(rng, 1500, 2048, 2046);
  big.mode = "full";
  big.max_tokens = 8;
  const auto r = engine.submit(big).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("fast memory"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("MiB"), std::string::npos) << r.error;
  vericache::Request small = big;
  small.prompt_ids.resize(100);
  const auto ok = engine.submit(small).result.get();
  EXPECT_TRUE(ok.ok) << ok.error;
  // The same long prompt fits compressed: the view and a tail, not its full KV.
  vericache::Request compressed = big;
  compressed.mode = "vericache";
  compressed.ratio = 8;
  const auto v = engine.submit(compressed).result.get();
  EXPECT_TRUE(v.ok) << v.error;
}

}  // namespace

namespace {

TEST(engine_memory, requests_wait_for_room_in_the_full_tiers_budget_and_one_that_never_fits_fails) {
  auto cases = long_cases(6, "vericache", 31);
  const vc::KvCacheConfig kv = vc::test::tinycode()->kv_config(16, vc::DType::bf16);
  const size_t per_token = 2 * kv.num_layers * kv.kv_heads * kv.head_dim * 2;
  EngineConfig cfg;
  cfg.model_dir = VC_MODEL_DIR;
  cfg.max_active = 6;
  cfg.full_tier_bytes = 2 * (1500 + 12 + 1) * per_token;  // two requests' full KV at most
  Engine engine(cfg);
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << "request " << i << ": " << r.error;
    EXPECT_EQ(r.output_ids, cases[i].ids) << "request " << i;
  }
  EXPECT_LE(engine.stats().full_tier_bytes_held, cfg.full_tier_bytes);
  vericache::Request huge = cases[0].req;
  std::mt19937 rng(3);
  huge.prompt_ids = vc::test::random_tokens(rng, 3100, 2048, 2046);
  const auto r = engine.submit(huge).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("full tier"), std::string::npos) << r.error;
}

}  // namespace

// The full KV staged in chunks of positions: prefill that streams through the full
// tier, and verify passes reading it back a chunk at a time, give the bits of full
// decoding for prompts past 512 positions (where attention splits KV heads across
// threads) at several chunk sizes, and lossy mode builds the same view whatever
// the chunk size; the prompt's KV never occupies the drafter's block pool.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/error.hpp"
#include "kvtiers/fast_memory.hpp"
#include "runtime/generator.hpp"
#include "runtime/streamed_prefill.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

Generator make_generator(size_t stage_positions, const std::string& tier = "host") {
  GeneratorConfig gc;
  gc.max_context = 4096;
  gc.full_tier = tier;
  gc.stage_positions = stage_positions;
  return Generator(test::tinycode(), test::tinycode_tokenizer(), gc);
}

GenerateOptions options(DecodeMode mode, const std::string& compressor, SamplingParams s = {}) {
  GenerateOptions o;
  o.mode = mode;
  o.compressor = compressor;
  o.ratio = 4;
  o.max_tokens = 48;
  o.draft_length = 8;
  o.fold_every = 32;
  o.sampling = s;
  o.stop_at_eos = false;
  return o;
}

void expect_same_bits(const GenerateResult& a, const GenerateResult& b, const std::string& what) {
  ASSERT_EQ(a.output_ids, b.output_ids) << what;
  ASSERT_EQ(a.output_logprobs.size(), b.output_logprobs.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.output_logprobs.data(), b.output_logprobs.data(),
                           a.output_logprobs.size() * sizeof(float)))
      << what << ": logprobs differ in some bit";
}

std::vector<int32_t> long_prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const ModelConfig& c = test::tinycode()->config();
  return test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

TEST(streamed_kv, vericache_equals_full_decoding_at_every_chunk_size_past_512_positions) {
  const SamplingParams sampled{0.9f, 50, 0.95f, 99};
  for (size_t n : {700u, 1301u}) {
    const auto prompt = long_prompt(n, uint32_t(n));
    for (const SamplingParams& s : {SamplingParams{}, sampled}) {
      auto ref_gen = make_generator(0);
      const GenerateResult full = ref_gen.generate(prompt, options(DecodeMode::full, "snapkv", s));
      for (size_t chunk : {16u, 48u, 1024u, 0u}) {
        for (const char* c : {"streaming_llm", "snapkv", "kivi"}) {
          auto g = make_generator(chunk);
          const GenerateResult v = g.generate(prompt, options(DecodeMode::vericache, c, s));
          expect_same_bits(full, v, std::string(c) + " n=" + std::to_string(n) + " chunk=" +
                                        std::to_string(chunk) + " T=" + std::to_string(s.temperature));
          EXPECT_GT(v.stats.rounds, 0u);
        }
      }
    }
  }
}

TEST(streamed_kv, vericache_on_the_disk_tier_in_small_chunks_equals_full_decoding) {
  const auto prompt = long_prompt(900, 5);
  auto ref_gen = make_generator(0);
  const GenerateResult full = ref_gen.generate(prompt, options(DecodeMode::full, "snapkv"));
  auto g = make_generator(64, "disk");
  expect_same_bits(full, g.generate(prompt, options(DecodeMode::vericache, "h2o")), "disk h2o");
}

TEST(streamed_kv, lossy_output_does_not_depend_on_the_chunk_size) {
  const auto prompt = long_prompt(800, 11);
  for (const char* c : {"snapkv", "h2o", "expected_attention", "kivi", "laprox"}) {
    auto whole = make_generator(0);
    const GenerateResult ref = whole.generate(prompt, options(DecodeMode::lossy, c));
    for (size_t chunk : {16u, 256u}) {
      auto g = make_generator(chunk);
      expect_same_bits(ref, g.generate(prompt, options(DecodeMode::lossy, c)),
                       std::string(c) + " chunk=" + std::to_string(chunk));
    }
  }
}

TEST(streamed_kv, the_prompt_never_takes_blocks_of_the_drafters_pool) {
  const auto prompt = long_prompt(1000, 3);
  for (DecodeMode m : {DecodeMode::lossy, DecodeMode::vericache}) {
    auto g = make_generator(128);
    size_t most = 0;
    GenerateOptions o = options(m, "snapkv");
    (void)g.generate(prompt, o, [&](int32_t) {
      most = std::max(most, g.cache().pool().used_blocks());
      return true;
    });
    // The tail only: fold_every + a draft block + the boundary block, never the
    // 63 blocks of the prompt.
    const size_t bt = g.cache().config().block_tokens;
    EXPECT_LE(most * bt, o.fold_every + o.draft_length + 1 + 2 * bt) << decode_mode_name(m);
    EXPECT_EQ(0u, g.cache().pool().used_blocks());
  }
}

}  // namespace
}  // namespace vc

namespace vc {
namespace {

TEST(streamed_kv, a_streamed_prefill_frees_its_staging_once_the_prompt_is_in) {
  const auto model = test::tinycode();
  const auto prompt = long_prompt(700, 31);
  const KvCacheConfig cfg = model->kv_config(1024, DType::bf16);
  HostFullTier tier(cfg);
  PagedKvCache scratch(cfg);
  FastMemory budget(64u << 20);
  LayerStreamer stream(tier, 128);
  stream.set_budget(&budget);
  Workspace ws(1);
  tier.create(1);
  const std::vector<float> logits = prefill_to_tier(*model, prompt, 1, tier, stream, scratch, ws, 256);
  EXPECT_EQ(tier.length(1), prompt.size());
  EXPECT_GT(budget.peak(), 0u);  // the staging was charged while the prompt ran
  EXPECT_EQ(stream.staging_bytes(), 0u);
  EXPECT_EQ(budget.used(), 0u);
  // A pass after it stages again and gives the logits a prefill into the cache gives.
  std::vector<float> more;
  tier.create(2);
  (void)prefill_to_tier(*model, std::span(prompt).first(300), 2, tier, stream, scratch, ws, 128);
  more = prefill_to_tier(*model, std::span(prompt).subspan(300), 2, tier, stream, scratch, ws, 128);
  EXPECT_EQ(stream.staging_bytes(), 0u);
  ASSERT_EQ(more.size(), logits.size());
  EXPECT_EQ(0, std::memcmp(more.data(), logits.data(), logits.size() * sizeof(float)));
}

TEST(streamed_kv, lossy_mode_keeps_no_full_copy_of_the_prompt_once_the_view_is_built) {
  const auto prompt = long_prompt(600, 21);
  for (const char* tier : {"host", "disk"}) {
    auto g = make_generator(64, tier);
    GenerateOptions o = options(DecodeMode::lossy, "snapkv");
    size_t calls = 0;
    const GenerateResult r = g.generate(prompt, o, [&](int32_t) {
      ++calls;
      return true;
    });
    EXPECT_EQ(r.output_ids.size(), size_t(o.max_tokens));
    EXPECT_EQ(calls, size_t(o.max_tokens));
    // The view and the tail, well under the prompt's full KV.
    EXPECT_LT(r.stats.fast_kv_bytes_peak, prompt.size() * g.cache().bytes_per_token() / 2) << tier;
  }
}

TEST(streamed_kv, a_budget_too_small_for_the_request_fails_before_any_work_naming_the_sizes) {
  GeneratorConfig gc;
  gc.max_context = 4096;
  gc.fast_memory_bytes = 200 * 3072;  // 200 tokens of full KV
  Generator g(test::tinycode(), test::tinycode_tokenizer(), gc);
  const auto prompt = long_prompt(900, 2);
  try {
    (void)g.generate(prompt, options(DecodeMode::full, "snapkv"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fast memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
  // The same prompt fits compressed, and the budget holds through the run.
  GeneratorConfig big = gc;
  big.fast_memory_bytes = 4 << 20;
  Generator g2(test::tinycode(), test::tinycode_tokenizer(), big);
  const GenerateResult r = g2.generate(prompt, options(DecodeMode::vericache, "snapkv"));
  EXPECT_LE(r.stats.fast_bytes_peak, big.fast_memory_bytes);
  EXPECT_GT(r.stats.fast_bytes_peak, 0u);
}

TEST(streamed_kv, a_full_tier_budget_too_small_for_the_request_fails_before_any_work) {
  // It failed in the middle of the prefill, the budget exhausted ("growing to N
  // positions needs ..."), after the work before it.
  GeneratorConfig gc;
  gc.max_context = 4096;
  gc.full_tier_bytes = 300 * 3072;  // 300 tokens of full KV
  Generator g(test::tinycode(), test::tinycode_tokenizer(), gc);
  const auto prompt = long_prompt(900, 2);
  try {
    (void)g.generate(prompt, options(DecodeMode::vericache, "snapkv"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generate: the request's full KV needs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than its budget of 900.00 KiB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc

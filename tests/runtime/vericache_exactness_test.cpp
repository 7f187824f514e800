// The exactness contract (DESIGN.md): for every compressor, ratio and draft length,
// greedy and seeded sampling, draft-and-verify decoding emits the token ids and the
// log-probabilities of --mode full, bit for bit. A mismatch is a bug in batch
// invariance or in the commit logic, never noise.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "kvtiers/compressor.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

struct Setting {
  SamplingParams sampling;
  const char* name;
};

const Setting kSettings[] = {{SamplingParams{}, "greedy"},
                             {SamplingParams{0.9f, 50, 0.95f, 1234}, "sampled"}};

Generator make_generator(const std::string& tier = "host") {
  GeneratorConfig gc;
  gc.max_context = 2048;
  gc.full_tier = tier;
  return Generator(test::tinycode(), test::tinycode_tokenizer(), gc);
}

GenerateOptions base_options(const Setting& s, int max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling = s.sampling;
  o.stop_at_eos = false;
  return o;
}

using test::expect_identical;

std::vector<std::vector<int32_t>> prompts(size_t golden, size_t generated) {
  std::vector<std::vector<int32_t>> out;
  const auto& g = test::golden()["cases"];
  for (size_t i = 0; i < golden && i < g.size(); ++i)
    out.push_back(g[i]["prompt_ids"].get<std::vector<int32_t>>());
  std::mt19937 rng(77);
  const ModelConfig& c = test::tinycode()->config();
  for (size_t i = 0; i < generated; ++i)
    out.push_back(test::random_tokens(rng, 40 + 37 * i, c.vocab_size, c.bos_token_id));
  return out;
}

TEST(vericache_exactness, every_compressor_ratio_and_draft_length_matches_full_decoding) {
  auto gen = make_generator();
  std::vector<std::string> methods = compressor_names();
  methods.push_back("snapkv+kivi");
  methods.push_back("streaming_llm+rotate_kv");
  const auto ps = prompts(1, 1);
  for (const auto& setting : kSettings)
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      const auto full = gen.generate(ps[pi], base_options(setting, 40));
      for (const auto& m : methods)
        for (double ratio : {2.0, 4.0, 8.0})
          for (int draft : {1, 4, 16, 30, 64, -1}) {
            GenerateOptions o = base_options(setting, 40);
            o.mode = DecodeMode::vericache;
            o.compressor = m;
            o.ratio = ratio;
            o.draft_auto = draft < 0;
            o.draft_length = size_t(std::max(draft, 0));
            const auto r = gen.generate(ps[pi], o);
            expect_identical(full, r,
                             std::string(setting.name) + " prompt " + std::to_string(pi) + " " +
                                 m + " " + std::to_string(ratio) + "x draft " +
                                 (draft < 0 ? "auto" : std::to_string(draft)));
            EXPECT_GT(r.stats.rounds, 0u);
          }
    }
}

TEST(vericache_exactness, holds_over_many_prompts_golden_and_generated) {
  auto gen = make_generator();
  for (const auto& setting : kSettings)
    for (const auto& p : prompts(8, 6)) {
      const auto full = gen.generate(p, base_options(setting, 48));
      for (const char* m : {"streaming_llm", "snapkv", "laprox", "kivi"}) {
        GenerateOptions o = base_options(setting, 48);
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.ratio = 8.0;
        o.draft_auto = true;
        expect_identical(full, gen.generate(p, o),
                         std::string(setting.name) + " " + m + " prompt of " +
                             std::to_string(p.size()) + " tokens");
      }
    }
}

TEST(vericache_exactness, holds_while_the_view_is_rebuilt_through_the_compressor) {
  auto gen = make_generator();
  std::vector<std::string> methods = compressor_names();
  methods.push_back("h2o+kivi");
  const auto p = prompts(1, 0)[0];
  for (const auto& setting : kSettings) {
    const auto full = gen.generate(p, base_options(setting, 96));
    for (const auto& m : methods)
      for (int draft : {4, 16, -1}) {
        GenerateOptions o = base_options(setting, 96);
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.ratio = 4.0;
        o.fold_every = 8;
        o.draft_auto = draft < 0;
        o.draft_length = size_t(std::max(draft, 0));
        const auto r = gen.generate(p, o);
        expect_identical(full, r, std::string(setting.name) + " " + m + " folding, draft " +
                                      std::to_string(draft));
        EXPECT_GT(r.stats.folds, 0u) << m;
      }
  }
}

TEST(vericache_view, keeps_its_budget_as_the_request_grows) {
  auto gen = make_generator();
  const auto p = prompts(1, 0)[0];  // 65 tokens
  const size_t bpt = gen.cache().bytes_per_token();
  for (const char* m : {"snapkv", "streaming_llm", "kivi"}) {
    GenerateOptions o = base_options(kSettings[0], 300);
    o.mode = DecodeMode::vericache;
    o.compressor = m;
    o.ratio = 4.0;
    o.draft_length = 8;
    o.fold_every = 32;
    const auto r = gen.generate(p, o);
    const size_t total = p.size() + r.output_ids.size();
    // View (a quarter of the full bytes, within rounding) + a tail shorter than
    // fold_every + one round.
    EXPECT_LE(r.stats.fast_bytes_end, size_t(1.1 * double(total * bpt) / 4.0) + (32 + 9) * bpt)
        << m << ": " << r.stats.fast_bytes_end << " bytes for " << total << " positions";
    o.fold_every = 0;  // never rebuilt: the tail grows at full precision
    const auto grown = gen.generate(p, o);
    EXPECT_GT(grown.stats.fast_bytes_end, r.stats.fast_bytes_end) << m;
    EXPECT_EQ(grown.output_ids, r.output_ids);
  }
}

TEST(vericache_exactness, holds_with_the_full_kv_on_disk) {
  auto gen = make_generator("disk");
  const auto p = prompts(1, 0)[0];
  for (const auto& setting : kSettings) {
    const auto full = gen.generate(p, base_options(setting, 40));
    GenerateOptions o = base_options(setting, 40);
    o.mode = DecodeMode::vericache;
    o.compressor = "h2o";
    o.draft_length = 16;
    const auto r = gen.generate(p, o);
    expect_identical(full, r, std::string(setting.name) + " disk tier");
    EXPECT_EQ(r.stats.full_tier, "disk");
    EXPECT_GT(r.stats.full_tier_bytes_read, 0u);
  }
}

TEST(vericache_exactness, stops_on_the_same_token_as_full_decoding) {
  auto gen = make_generator();
  const auto p = prompts(1, 0)[0];
  GenerateOptions o = base_options(kSettings[0], 40);
  const auto plain = gen.generate(p, o);
  o.eos_token_ids = {plain.output_ids[17]};
  o.stop_at_eos = true;
  const auto full = gen.generate(p, o);
  o.mode = DecodeMode::vericache;
  o.draft_length = 30;
  const auto r = gen.generate(p, o);
  expect_identical(full, r, "eos inside a draft block");
  EXPECT_EQ(r.finish_reason, "eos");
}

TEST(vericache_stats, count_rounds_drafts_and_acceptance_consistently) {
  auto gen = make_generator();
  const auto p = prompts(1, 0)[0];
  GenerateOptions o = base_options(kSettings[0], 64);
  o.mode = DecodeMode::vericache;
  o.compressor = "snapkv";
  o.draft_length = 8;
  const auto r = gen.generate(p, o);
  const GenerateStats& s = r.stats;
  size_t rounds = 0, accepted = 0;
  for (size_t k = 0; k < s.accepted_histogram.size(); ++k) {
    rounds += s.accepted_histogram[k];
    accepted += k * s.accepted_histogram[k];
  }
  EXPECT_EQ(rounds, s.rounds);
  EXPECT_EQ(accepted, s.accepted);
  EXPECT_LE(s.accepted, s.drafted);
  // One token after prefill, then each round emits its accepted drafts + 1.
  EXPECT_EQ(r.output_ids.size(), 1 + s.accepted + s.rounds);
  EXPECT_GT(s.full_tier_bytes_read, 0u);
  EXPECT_GT(s.compressed_bytes_read, 0u);
}

}  // namespace
}  // namespace vc

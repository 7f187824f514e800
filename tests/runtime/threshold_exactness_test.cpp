// Threshold selection inside VeriCache: every token-dropping scorer selecting by
// threshold still gives the output of full-KV decoding bit for bit (greedy and
// seeded), and the achieved ratio is reported and depends on the threshold.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

TEST(threshold_exactness, every_scorer_selecting_by_threshold_matches_full_decoding) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  Generator gen(test::tinycode(), test::tinycode_tokenizer(), gc);
  const auto& g = test::golden()["cases"];
  const std::vector<int32_t> prompt = g[2]["prompt_ids"].get<std::vector<int32_t>>();
  for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 77}}) {
    GenerateOptions o;
    o.max_tokens = 32;
    o.sampling = s;
    o.stop_at_eos = false;
    const auto full = gen.generate(prompt, o);
    for (const char* m :
         {"snapkv", "h2o", "expected_attention", "kvzip", "laprox", "snapkv+kivi", "kvzap"})
      for (double tau : std::string(m) == "kvzap" ? std::vector<double>{-8.0, -5.0}  // log scores
                                                  : std::vector<double>{1e-3, 0.05}) {
        GenerateOptions v = o;
        v.mode = DecodeMode::vericache;
        v.compressor = m;
        v.compressor_params = {{"threshold", tau}, {"keep_recent", 16}};
        v.draft_length = 8;
        const auto r = gen.generate(prompt, v);
        const std::string what = std::string(m) + " tau " + std::to_string(tau) +
                                 (s.greedy() ? " greedy" : " seeded");
        ASSERT_EQ(full.output_ids, r.output_ids) << what;
        EXPECT_EQ(0, std::memcmp(full.output_logprobs.data(), r.output_logprobs.data(),
                                 full.output_logprobs.size() * sizeof(float)))
            << what;
        ASSERT_GT(r.stats.compressed_bytes, 0u) << what;
        EXPECT_GE(r.stats.compressed_full_bytes, r.stats.compressed_bytes) << what;
      }
  }
}

TEST(threshold_exactness, the_achieved_ratio_grows_with_the_threshold) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  Generator gen(test::tinycode(), test::tinycode_tokenizer(), gc);
  const auto& g = test::golden()["cases"];
  const std::vector<int32_t> prompt = g[2]["prompt_ids"].get<std::vector<int32_t>>();
  double last = 0;
  for (double tau : {-1e30, 1e-3, 1e-2, 1e30}) {
    GenerateOptions o;
    o.max_tokens = 4;
    o.mode = DecodeMode::lossy;
    o.compressor = "kvzip";
    o.compressor_params = {{"threshold", tau}, {"keep_recent", 8}};
    const auto r = gen.generate(prompt, o);
    const double achieved = double(r.stats.compressed_full_bytes) / double(r.stats.compressed_bytes);
    EXPECT_GE(achieved, last) << "tau " << tau;
    if (tau < -1e29) {
      EXPECT_DOUBLE_EQ(achieved, 1.0);
    }
    if (tau > 1e29) {
      EXPECT_GT(achieved, 4.0) << "keeps only the recent window";
    }
    last = achieved;
  }
}

}  // namespace
}  // namespace vc

// Two Generators in one process on the disk full tier, sharing one directory and
// both numbering their requests from 1, decode at the same time in two threads:
// each output is still that of --mode full (each tier keeps to its private dir).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

namespace fs = std::filesystem;

GenerateOptions options(DecodeMode mode, uint64_t seed) {
  GenerateOptions o;
  o.max_tokens = 48;
  o.stop_at_eos = false;
  o.sampling = SamplingParams{0.8f, 40, 1.0f, seed};
  o.mode = mode;
  o.compressor = "h2o";
  o.draft_length = 8;
  return o;
}

TEST(disk_tier_sharing, two_generators_in_two_threads_with_the_same_request_ids_match_full_decoding) {
  char tmpl[] = "/tmp/vc-disk-sharing-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const ModelConfig& mc = test::tinycode()->config();
  std::mt19937 rng(5);
  // Per generator, three prompts of different lengths (request ids 1, 2, 3 in each).
  std::vector<std::vector<std::vector<int32_t>>> prompts(2);
  for (auto& p : prompts)
    for (size_t i = 0; i < 3; ++i)
      p.push_back(test::random_tokens(rng, 30 + 50 * i + rng() % 20, mc.vocab_size, mc.bos_token_id));

  GeneratorConfig full_cfg;
  full_cfg.max_context = 1024;
  full_cfg.threads = 1;
  Generator full(test::tinycode(), test::tinycode_tokenizer(), full_cfg);
  std::vector<std::vector<GenerateResult>> expected(2);
  for (size_t g = 0; g < 2; ++g)
    for (size_t i = 0; i < 3; ++i)
      expected[g].push_back(full.generate(prompts[g][i], options(DecodeMode::full, 10 * g + i)));

  std::vector<std::vector<GenerateResult>> got(2);
  auto run = [&](size_t g) {
    GeneratorConfig cfg = full_cfg;
    cfg.full_tier = "disk";
    cfg.disk_dir = dir;
    Generator gen(test::tinycode(), test::tinycode_tokenizer(), cfg);
    for (size_t i = 0; i < 3; ++i)
      got[g].push_back(gen.generate(prompts[g][i], options(DecodeMode::vericache, 10 * g + i)));
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (size_t g = 0; g < 2; ++g)
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE("generator " + std::to_string(g) + ", request " + std::to_string(i + 1));
      const GenerateResult& r = got[g][i];
      EXPECT_EQ(r.stats.full_tier, "disk");
      ASSERT_EQ(r.output_ids, expected[g][i].output_ids);
      ASSERT_EQ(r.output_logprobs.size(), expected[g][i].output_logprobs.size());
      EXPECT_EQ(0, std::memcmp(r.output_logprobs.data(), expected[g][i].output_logprobs.data(),
                               r.output_logprobs.size() * sizeof(float)));
    }
  EXPECT_TRUE(fs::is_empty(dir));  // both private dirs removed, the given dir kept
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vc

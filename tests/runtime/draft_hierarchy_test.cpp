// The three-level drafter (n-gram proposals, checked by the compressed-KV drafter
// in one pass, then by the verifier): the output stays that of full-KV decoding bit
// for bit, greedy and seeded, and on a prompt that repeats itself the n-gram level
// really does supply drafts (so the exactness checks are not vacuous).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/generator.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

Generator make_generator() {
  GeneratorConfig gc;
  gc.max_context = 2048;
  return Generator(test::tinycode(), test::tinycode_tokenizer(), gc);
}

/// Code that repeats itself: what prompt lookup is for.
std::string repetitive_prompt() {
  std::string s;
  for (int i = 0; i < 4; ++i)
    s += "def add_" + std::to_string(i) + "(a, b):\n    total = a + b\n    return total\n\n";
  return s + "def add_4(a, b):\n";
}

GenerateOptions options(const SamplingParams& sampling, int max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling = sampling;
  o.stop_at_eos = false;
  return o;
}

using test::expect_identical;

TEST(draft_hierarchy, ngram_level_leaves_the_output_bit_identical_to_full_decoding) {
  auto gen = make_generator();
  const auto tok = test::tinycode_tokenizer();
  const std::vector<int32_t> repetitive = tok->encode(repetitive_prompt());
  std::mt19937 rng(5);
  const ModelConfig& c = test::tinycode()->config();
  const std::vector<int32_t> random = test::random_tokens(rng, 90, c.vocab_size, c.bos_token_id);
  const SamplingParams settings[] = {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 1234}};
  for (const SamplingParams& s : settings)
    for (const auto* prompt : {&repetitive, &random}) {
      const auto full = gen.generate(*prompt, options(s, 40));
      for (const char* m : {"streaming_llm", "snapkv", "kivi", "snapkv+kivi"})
        for (size_t draft : {1, 5, 16}) {
          GenerateOptions o = options(s, 40);
          o.mode = DecodeMode::vericache;
          o.compressor = m;
          o.draft_length = draft;
          o.draft_hierarchy = DraftHierarchy::ngram;
          o.ngram = NgramParams{1, 3, 6};
          const auto r = gen.generate(*prompt, o);
          expect_identical(full, r, std::string(m) + " draft " + std::to_string(draft) +
                                        (s.greedy() ? " greedy" : " seeded") +
                                        (prompt == &random ? " random prompt" : " repetitive prompt"));
          EXPECT_EQ(r.stats.levels.drafter_own + r.stats.levels.ngram_confirmed, r.stats.drafted);
        }
    }
}

TEST(draft_hierarchy, ngram_proposals_are_kept_by_the_drafter_and_accepted_on_a_repetitive_prompt) {
  auto gen = make_generator();
  for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.7f, 0, 1.0f, 99}}) {
    GenerateOptions o = options(s, 48);
    o.mode = DecodeMode::vericache;
    o.compressor = "snapkv";
    o.draft_length = 16;
    o.draft_hierarchy = DraftHierarchy::ngram;
    const auto r = gen.generate(repetitive_prompt(), o);
    const DraftLevelStats& l = r.stats.levels;
    EXPECT_GT(l.ngram_proposed, 0u);
    EXPECT_GT(l.ngram_confirmed, 0u);
    EXPECT_GT(l.ngram_accepted, 0u);
    EXPECT_LE(l.ngram_accepted, l.ngram_confirmed);
    EXPECT_LE(l.ngram_confirmed, l.ngram_proposed);
    EXPECT_LT(l.drafter_passes, r.stats.drafted) << "kept proposals save drafter passes";
  }
}

TEST(draft_hierarchy, the_drafts_and_so_the_acceptance_are_those_of_the_drafter_alone) {
  auto gen = make_generator();
  GenerateOptions o = options(SamplingParams{}, 48);
  o.mode = DecodeMode::vericache;
  o.compressor = "snapkv";
  o.draft_length = 12;
  const auto alone = gen.generate(repetitive_prompt(), o);
  o.draft_hierarchy = DraftHierarchy::ngram;
  const auto hier = gen.generate(repetitive_prompt(), o);
  EXPECT_EQ(alone.stats.rounds, hier.stats.rounds);
  EXPECT_EQ(alone.stats.accepted_histogram, hier.stats.accepted_histogram);
  EXPECT_EQ(alone.stats.levels.drafter_passes, alone.stats.drafted);
  EXPECT_EQ(alone.stats.levels.ngram_proposed, 0u);
}

}  // namespace
}  // namespace vc

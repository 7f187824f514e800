// Top-N log-probabilities: the sampler's list (sorted, ties by the smaller id, each
// entry with the bits of token_logprob), and through the generator: asking for them
// changes nothing else, and vericache reports the very lists of --mode full.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/generator.hpp"
#include "runtime/sampler.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

// Every logprob in order by the documented rule, from token_logprob alone: a full
// stable sort of the ids by logprob descending (a stable sort keeps the smaller id
// first among equals).
std::vector<TokenLogprob> reference_ranking(const std::vector<float>& logits) {
  std::vector<TokenLogprob> all;
  for (size_t i = 0; i < logits.size(); ++i)
    all.push_back({int32_t(i), token_logprob(logits, int32_t(i))});
  std::stable_sort(all.begin(), all.end(),
                   [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
  return all;
}

void expect_same_bits(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << what << ", entry " << i;
    EXPECT_EQ(bits(a[i].logprob), bits(b[i].logprob)) << what << ", entry " << i;
  }
}

TEST(top_logprobs, are_sorted_by_logprob_descending_with_ties_broken_by_the_smaller_id) {
  const std::vector<float> l{0.5f, 2.0f, -1.0f, 2.0f, 0.5f, 3.0f, 0.5f};
  const TokenLogprobs r = token_logprobs(l, 2, 5);
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : r.top) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 1, 3, 0, 4}));
  EXPECT_EQ(bits(r.top[1].logprob), bits(r.top[2].logprob));
  EXPECT_GT(r.top[0].logprob, r.top[1].logprob);
}

TEST(top_logprobs, equal_the_first_n_of_a_full_ranking_bit_for_bit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t vocab : {1u, 7u, 20u, 21u, 2048u}) {
    std::vector<float> l(vocab);
    for (float& v : l) v = normal(rng);
    if (vocab > 10) l[3] = l[9] = l[vocab - 1];  // ties somewhere
    const std::vector<TokenLogprob> ranking = reference_ranking(l);
    for (size_t n : {0u, 1u, 5u, 20u}) {
      const TokenLogprobs r = token_logprobs(l, int32_t(vocab / 2), n);
      const std::vector<TokenLogprob> want(ranking.begin(),
                                           ranking.begin() + ptrdiff_t(std::min(n, vocab)));
      expect_same_bits(r.top, want, "vocab " + std::to_string(vocab) + " n " + std::to_string(n));
      EXPECT_EQ(bits(r.logprob), bits(token_logprob(l, int32_t(vocab / 2))));
    }
  }
}

TEST(top_logprobs, hold_the_chosen_token_exactly_when_it_ranks_among_the_top_n) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(300);
  for (float& v : l) v = normal(rng);
  const std::vector<TokenLogprob> ranking = reference_ranking(l);
  for (size_t rank : {0u, 3u, 4u, 150u}) {
    const int32_t chosen = ranking[rank].id;
    const TokenLogprobs r = token_logprobs(l, chosen, 4);
    const auto it = std::find_if(r.top.begin(), r.top.end(),
                                 [&](const TokenLogprob& t) { return t.id == chosen; });
    EXPECT_EQ(it != r.top.end(), rank < 4) << "rank " << rank;
    if (it != r.top.end()) {
      EXPECT_EQ(bits(it->logprob), bits(r.logprob));
    }
  }
}

TEST(top_logprobs, outside_0_to_20_are_refused_by_the_sampling_checks) {
  SamplingParams p;
  p.top_logprobs = 20;
  validate(p);
  p.top_logprobs = 21;
  EXPECT_THROW(validate(p), Error);
  p.top_logprobs = -1;
  EXPECT_THROW(validate(p), Error);
}

// ---- through the generator ----

const char* kPrompt = "<|begin_of_text|>def fibonacci(n):\n    ";

Generator make_generator() {
  GeneratorConfig gc;
  gc.max_context = 2048;
  return Generator(test::tinycode(), test::tinycode_tokenizer(), gc);
}

GenerateOptions options(const SamplingParams& s, int top_n, int max_tokens = 40) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling = s;
  o.sampling.top_logprobs = top_n;
  o.stop_at_eos = false;
  return o;
}

const SamplingParams kGreedy{};
const SamplingParams kSeeded{0.9f, 50, 0.95f, 1234};

void expect_same_lists(const GenerateResult& a, const GenerateResult& b, const std::string& what) {
  ASSERT_EQ(a.output_ids, b.output_ids) << what;
  ASSERT_EQ(a.output_top_logprobs.size(), b.output_top_logprobs.size()) << what;
  for (size_t i = 0; i < a.output_top_logprobs.size(); ++i)
    expect_same_bits(a.output_top_logprobs[i], b.output_top_logprobs[i],
                     what + ", token " + std::to_string(i));
}

TEST(generator_top_logprobs, change_neither_the_tokens_nor_their_logprobs) {
  auto gen = make_generator();
  for (const SamplingParams& s : {kGreedy, kSeeded}) {
    const auto plain = gen.generate(kPrompt, options(s, 0));
    EXPECT_TRUE(plain.output_top_logprobs.empty());
    const auto with = gen.generate(kPrompt, options(s, 20));
    ASSERT_EQ(plain.output_ids, with.output_ids);
    ASSERT_EQ(plain.output_logprobs.size(), with.output_logprobs.size());
    for (size_t i = 0; i < plain.output_logprobs.size(); ++i)
      EXPECT_EQ(bits(plain.output_logprobs[i]), bits(with.output_logprobs[i])) << i;
    ASSERT_EQ(with.output_top_logprobs.size(), with.output_ids.size());
  }
}

TEST(generator_top_logprobs, list_the_chosen_token_with_its_own_logprob_when_it_ranks) {
  auto gen = make_generator();
  const auto greedy = gen.generate(kPrompt, options(kGreedy, 3));
  for (size_t i = 0; i < greedy.output_ids.size(); ++i) {
    const auto& top = greedy.output_top_logprobs[i];
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0].id, greedy.output_ids[i]) << "greedy picks the most likely token, " << i;
    EXPECT_EQ(bits(top[0].logprob), bits(greedy.output_logprobs[i])) << i;
  }
  SamplingParams hot{1.5f, 0, 1.0f, 99};
  const auto sampled = gen.generate(kPrompt, options(hot, 5, 64));
  size_t listed = 0, unlisted = 0;
  for (size_t i = 0; i < sampled.output_ids.size(); ++i) {
    const auto& top = sampled.output_top_logprobs[i];
    ASSERT_EQ(top.size(), 5u);
    EXPECT_TRUE(std::is_sorted(top.begin(), top.end(), [](auto& a, auto& b) {
      return a.logprob > b.logprob;
    }));
    const auto it = std::find_if(top.begin(), top.end(),
                                 [&](const TokenLogprob& t) { return t.id == sampled.output_ids[i]; });
    if (it == top.end()) {
      ++unlisted;
      EXPECT_LE(sampled.output_logprobs[i], top.back().logprob) << i;
    } else {
      ++listed;
      EXPECT_EQ(bits(it->logprob), bits(sampled.output_logprobs[i])) << i;
    }
  }
  EXPECT_GT(listed, 0u);
  EXPECT_GT(unlisted, 0u) << "at temperature 1.5 some draws fall outside the top 5";
}

TEST(generator_top_logprobs, are_those_of_full_decoding_in_vericache_mode_greedy_and_seeded) {
  auto gen = make_generator();
  for (const SamplingParams& s : {kGreedy, kSeeded}) {
    const auto full = gen.generate(kPrompt, options(s, 20, 64));
    for (const char* m : {"snapkv", "kivi"})
      for (int draft : {1, 8}) {
        GenerateOptions o = options(s, 20, 64);
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.draft_length = size_t(draft);
        o.fold_every = 16;  // the view is rebuilt on the way
        const auto r = gen.generate(kPrompt, o);
        expect_same_lists(full, r, std::string(s.greedy() ? "greedy " : "seeded ") + m +
                                       " draft " + std::to_string(draft));
        EXPECT_GT(r.stats.rounds, 0u);
      }
  }
}

}  // namespace
}  // namespace vc

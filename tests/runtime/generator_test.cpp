// Generation on the bundled model: stop conditions, determinism, bad requests.
#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

const char* kPrompt = "<|begin_of_text|>def fibonacci(n):\n    ";

Generator make(int threads = 0) {
  GeneratorConfig gc;
  gc.threads = threads;
  gc.max_context = 4096;
  return Generator(test::tinycode(), test::tinycode_tokenizer(), gc);
}

TEST(generator, stops_at_max_tokens) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 9;
  o.stop_at_eos = false;
  const auto r = g.generate(kPrompt, o);
  EXPECT_EQ(r.output_ids.size(), 9u);
  EXPECT_EQ(r.output_logprobs.size(), 9u);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(g.cache().pool().used_blocks(), 0u) << "the request's KV blocks are released";
}

TEST(generator, stops_at_an_end_of_sequence_token) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 12;
  const auto full = g.generate(kPrompt, o);
  ASSERT_GE(full.output_ids.size(), 4u);
  o.eos_token_ids = {full.output_ids[3]};
  const auto r = g.generate(kPrompt, o);
  ASSERT_LE(r.output_ids.size(), 4u);
  EXPECT_EQ(r.output_ids.back(), full.output_ids[3]);
  EXPECT_EQ(r.finish_reason, "eos");
}

TEST(generator, stops_at_a_stop_string_and_cuts_the_text_before_it) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 32;
  o.stop_at_eos = false;
  const auto full = g.generate(kPrompt, o);
  ASSERT_GT(full.text.size(), 12u);
  const std::string stop = full.text.substr(8, 3);
  o.stop = {stop};
  const auto r = g.generate(kPrompt, o);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find(stop)));
}

TEST(generator, finds_a_long_stop_string_spanning_many_tokens) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 48;
  o.stop_at_eos = false;
  const auto full = g.generate(kPrompt, o);
  ASSERT_GT(full.text.size(), 30u);
  const std::string stop = full.text.substr(6, 20);  // many tokens long
  o.stop = {stop};
  const auto r = g.generate(kPrompt, o);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find(stop)));
  // It stops on the token that completes the string, not later.
  const auto upto = std::vector<int32_t>(full.output_ids.begin(),
                                         full.output_ids.begin() + ptrdiff_t(r.output_ids.size()) - 1);
  EXPECT_EQ(test::tinycode_tokenizer()->decode(upto).find(stop), std::string::npos);
}

TEST(generator, a_seed_gives_the_same_text_with_any_thread_count) {
  GenerateOptions o;
  o.max_tokens = 24;
  o.stop_at_eos = false;
  o.sampling = SamplingParams{0.9f, 40, 0.95f, 2026};
  auto g1 = make(1);
  auto g2 = make(2);
  const auto a = g1.generate(kPrompt, o);
  const auto b = g2.generate(kPrompt, o);
  EXPECT_EQ(a.output_ids, b.output_ids);
  EXPECT_EQ(a.output_logprobs, b.output_logprobs);
  o.sampling.seed = 7;
  const auto c = g1.generate(kPrompt, o);
  EXPECT_NE(a.output_ids, c.output_ids);
}

TEST(generator, a_compressor_parameter_changes_what_the_view_keeps) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 2;  // step 0 comes from the prefill; step 1 from the compressed view
  o.stop_at_eos = false;
  o.keep_logits = true;
  o.mode = DecodeMode::lossy;
  o.compressor = "streaming_llm";
  o.ratio = 4.0;
  o.compressor_params = {{"sinks", 1}};  // the first token + the most recent ones
  const auto recent = g.generate(kPrompt, o);
  o.compressor_params = {{"sinks", 64}};  // sinks only: the first tokens
  const auto first = g.generate(kPrompt, o);
  EXPECT_EQ(recent.stats.compressed_bytes, first.stats.compressed_bytes);
  EXPECT_NE(recent.step_logits, first.step_logits) << "other positions kept, other logits";
  o.compressor_params = {{"no_such_param", 1}};
  try {
    (void)g.generate(kPrompt, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_param"), std::string::npos) << e.what();
  }
}

TEST(generator, rejects_a_request_longer_than_the_context_naming_the_limit) {
  auto g = make();
  GenerateOptions o;
  o.max_tokens = 5000;
  try {
    (void)g.generate(kPrompt, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context limit of 4096"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)g.generate(std::vector<int32_t>{}, o), Error);
}

TEST(generator, a_block_size_outside_1_to_4096_is_an_error_naming_it) {
  for (const size_t bt : {size_t(0), size_t(4097)}) {
    GeneratorConfig gc;
    gc.block_tokens = bt;
    try {
      Generator g(test::tinycode(), test::tinycode_tokenizer(), gc);
      ADD_FAILURE() << "block_tokens " << bt << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("block_tokens: expected 1-4096 positions, got " +
                                           std::to_string(bt)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace vc

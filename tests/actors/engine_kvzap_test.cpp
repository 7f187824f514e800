// KVzap through the actor engine: requests whose views are rebuilt often (the verify
// passes score new tokens, the folds rank them by those scores) match full-KV
// decoding bit for bit, greedy and seeded, by ratio and by threshold. (The engine
// does not report its fold count; fold_every 8 makes a fold due every round or two.)
#include <gtest/gtest.h>

#include <vericache/engine.hpp>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

TEST(engine_kvzap, folding_kvzap_requests_match_full_decoding_bit_for_bit) {
  const auto model = vc::test::tinycode();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
  vericache::EngineConfig ec;
  ec.model_dir = VC_MODEL_DIR;
  ec.max_active = 4;
  vericache::Engine engine(ec);
  const std::vector<int32_t> prompt = vc::test::golden()["cases"][1]["prompt_ids"];
  std::vector<vericache::Request> reqs(4);
  std::vector<vericache::Engine::Submission> subs;
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < reqs.size(); ++i) {
    vericache::Request& r = reqs[i];
    r.prompt_ids = prompt;
    r.max_tokens = 80;
    r.ignore_eos = true;
    r.mode = "vericache";
    r.compressor = "kvzap";
    r.ratio = 4.0;
    r.draft = "8";
    r.fold_every = 8;
    if (i % 2 == 1) r.compressor_params = {{"threshold", -4.0}, {"keep_recent", 8}};
    if (i >= 2) r.temperature = 0.8f, r.top_k = 50, r.seed = 11 + i;
    vc::GenerateOptions o;
    o.max_tokens = r.max_tokens;
    o.stop_at_eos = false;
    o.sampling = {r.temperature, r.top_k, r.top_p, r.seed};
    expected.push_back(gen.generate(prompt, o).output_ids);
    subs.push_back(engine.submit(r));
  }
  for (size_t i = 0; i < subs.size(); ++i) {
    const auto res = subs[i].result.get();
    ASSERT_TRUE(res.ok) << res.error;
    EXPECT_EQ(res.output_ids, expected[i]) << "request " << i;
  }
}

}  // namespace

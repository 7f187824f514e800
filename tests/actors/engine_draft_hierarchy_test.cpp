// The three-level drafter through the embedding API: concurrent requests with the
// n-gram level (batched drafter passes of several rows per request, mixed with
// requests without it) emit exactly what full-KV decoding of each alone emits, and
// the per-level counts show the n-gram level at work.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <vericache/engine.hpp>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

std::string repeated_code(int variant) {
  std::string s;
  for (int i = 0; i < 4; ++i)
    s += "def f" + std::to_string(variant) + "_" + std::to_string(i) +
         "(x):\n    y = x * " + std::to_string(variant + 2) + "\n    return y\n\n";
  return s + "def f" + std::to_string(variant) + "_4(x):\n";
}

TEST(engine_draft_hierarchy, concurrent_ngram_requests_match_full_decoding_bit_for_bit) {
  const auto model = vc::test::tinycode();
  const auto tok = vc::test::tinycode_tokenizer();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator gen(model, tok, gc);
  std::mt19937 rng(31);
  const auto& cfg = model->config();

  std::vector<vericache::Request> reqs;
  const char* methods[] = {"snapkv", "streaming_llm", "kivi", "snapkv+kivi", "h2o", "kvzip"};
  for (size_t i = 0; i < 6; ++i) {
    vericache::Request q;
    q.prompt_ids = i == 5 ? vc::test::random_tokens(rng, 70, cfg.vocab_size, cfg.bos_token_id)
                          : tok->encode(repeated_code(int(i)));
    q.max_tokens = 32;
    q.mode = "vericache";
    q.compressor = methods[i];
    q.draft = i % 2 == 0 ? "12" : "auto";
    q.draft_hierarchy = i == 4 ? "none" : "ngram";  // one drafts alone beside the others
    q.ngram_min = 1;
    q.ngram_max = 3;
    q.ngram_proposal = 6;
    q.ignore_eos = true;
    q.fold_every = i % 3 == 0 ? 8 : 64;
    if (i % 2 == 1) {
      q.temperature = 0.8f;
      q.top_k = 50;
      q.seed = 1000 + i;
    }
    reqs.push_back(q);
  }
  vericache::EngineConfig ec;
  ec.model_dir = VC_MODEL_DIR;
  ec.max_active = 6;
  vericache::Engine engine(ec);
  std::vector<vericache::Engine::Submission> subs;
  for (const auto& q : reqs) subs.push_back(engine.submit(q));
  size_t ngram_accepted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    vc::GenerateOptions o;
    o.max_tokens = reqs[i].max_tokens;
    o.stop_at_eos = false;
    o.sampling = {reqs[i].temperature, reqs[i].top_k, reqs[i].top_p, reqs[i].seed};
    const auto full = gen.generate(reqs[i].prompt_ids, o);
    EXPECT_EQ(r.output_ids, full.output_ids) << "request " << i << " " << reqs[i].compressor;
    EXPECT_EQ(r.output_logprobs, full.output_logprobs) << "request " << i;
    EXPECT_LE(r.stats.ngram_accepted, r.stats.ngram_confirmed);
    EXPECT_LE(r.stats.ngram_confirmed, r.stats.ngram_proposed);
    if (reqs[i].draft_hierarchy == "none") {
      EXPECT_EQ(r.stats.ngram_proposed, 0u);
      EXPECT_EQ(r.stats.ngram_seconds, 0.0) << "no level, no lookups";
    } else if (r.stats.ngram_proposed > 0) {
      EXPECT_GT(r.stats.ngram_seconds, 0.0) << "the level's cost: its lookups took time";
    }
    ngram_accepted += r.stats.ngram_accepted;
  }
  EXPECT_GT(ngram_accepted, 0u) << "the n-gram level supplied no accepted draft";
}

TEST(engine_draft_hierarchy, rejects_a_bad_hierarchy_or_ngram_size_naming_the_field) {
  vericache::EngineConfig ec;
  ec.model_dir = VC_MODEL_DIR;
  vericache::Engine engine(ec);
  vericache::Request q;
  q.prompt = "def f(x):";
  q.draft_hierarchy = "eagle";
  auto r = engine.submit(q).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("draft_hierarchy"), std::string::npos) << r.error;
  q.draft_hierarchy = "ngram";
  q.ngram_min = 4;
  q.ngram_max = 2;
  r = engine.submit(q).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("ngram_max"), std::string::npos) << r.error;
}

}  // namespace

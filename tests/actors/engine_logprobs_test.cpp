// Top-N log-probabilities through the embedding API: concurrent requests of every
// mode report the lists the single-request generator reports (vericache: those of
// full-KV decoding), bit for bit; the detailed token callback streams the same
// values as the Result holds; a bad count fails naming the field.
#include <gtest/gtest.h>

#include <bit>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <vericache/engine.hpp>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

template <class A, class B>
void expect_same_lists(const std::vector<std::vector<A>>& a, const std::vector<std::vector<B>>& b,
                       const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << ", token " << i;
    for (size_t k = 0; k < a[i].size(); ++k) {
      EXPECT_EQ(a[i][k].id, b[i][k].id) << what << ", token " << i << " entry " << k;
      EXPECT_EQ(bits(a[i][k].logprob), bits(b[i][k].logprob)) << what << ", token " << i;
    }
  }
}

vericache::EngineConfig config() {
  vericache::EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.max_active = 8;
  return c;
}

TEST(engine_top_logprobs, concurrent_requests_of_every_mode_report_the_generators_lists) {
  const auto model = vc::test::tinycode();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
  std::mt19937 rng(17);
  const auto& cfg = model->config();
  const char* modes[] = {"vericache", "full", "lossy", "vericache", "vericache", "full"};
  const char* drafts[] = {"8", "16", "16", "auto", "1", "16"};
  std::vector<vericache::Request> reqs;
  for (size_t i = 0; i < 6; ++i) {
    vericache::Request q;
    q.prompt_ids = vc::test::random_tokens(rng, 40 + 31 * i, cfg.vocab_size, cfg.bos_token_id);
    q.max_tokens = 20 + int(i) * 3;  // full mode decodes in blocks of 16: one spans two
    q.mode = modes[i];
    q.compressor = i % 2 == 0 ? "snapkv" : "kivi";
    q.draft = drafts[i];
    q.fold_every = 8;
    q.ignore_eos = true;
    q.top_logprobs = int(1 + i * 3);  // 1 .. 16
    if (i % 2 == 1) {
      q.temperature = 0.9f;
      q.top_k = 40;
      q.seed = 500 + i;
    }
    reqs.push_back(q);
  }
  vericache::Engine engine(config());
  std::vector<vericache::Engine::Submission> subs;
  for (const auto& q : reqs) subs.push_back(engine.submit(q));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    vc::GenerateOptions o;
    o.max_tokens = reqs[i].max_tokens;
    o.stop_at_eos = false;
    o.fold_every = reqs[i].fold_every;
    o.sampling = {reqs[i].temperature, reqs[i].top_k, reqs[i].top_p, reqs[i].seed,
                  reqs[i].top_logprobs};
    if (reqs[i].mode == std::string("lossy")) {  // the lossy model's own lists
      o.mode = vc::DecodeMode::lossy;
      o.compressor = reqs[i].compressor;
      o.ratio = reqs[i].ratio;
    }
    const auto want = gen.generate(reqs[i].prompt_ids, o);
    const std::string what = "request " + std::to_string(i) + " (" + reqs[i].mode + ")";
    ASSERT_EQ(r.output_ids, want.output_ids) << what;
    EXPECT_EQ(r.output_logprobs, want.output_logprobs) << what;
    ASSERT_EQ(r.output_top_logprobs.size(), r.output_ids.size()) << what;
    EXPECT_EQ(r.output_top_logprobs[0].size(), size_t(reqs[i].top_logprobs)) << what;
    expect_same_lists(r.output_top_logprobs, want.output_top_logprobs, what);
  }
}

TEST(engine_top_logprobs, the_detailed_callback_streams_what_the_result_holds) {
  vericache::Engine engine(config());
  vericache::Request q;
  q.prompt = "<|begin_of_text|>def add(a, b):";
  q.max_tokens = 24;
  q.draft = std::string("6");  // not = "6": GCC 12 -O3 reports a false -Wrestrict there
  q.ignore_eos = true;
  q.temperature = 0.7f;
  q.seed = 3;
  q.top_logprobs = 4;
  std::mutex mu;
  std::vector<int32_t> ids;
  std::vector<float> lps;
  std::vector<std::vector<vericache::TokenLogprob>> tops;
  auto sub = engine.submit(q, [&](uint64_t, const vericache::EmittedToken& t) {
    std::lock_guard lock(mu);
    ids.push_back(t.id);
    lps.push_back(t.logprob);
    tops.emplace_back(t.top_logprobs.begin(), t.top_logprobs.end());
  });
  const auto r = sub.result.get();
  ASSERT_TRUE(r.ok) << r.error;
  std::lock_guard lock(mu);
  EXPECT_EQ(ids, r.output_ids);
  EXPECT_EQ(lps, r.output_logprobs);
  expect_same_lists(tops, r.output_top_logprobs, "streamed");

  q.top_logprobs = 0;  // none asked for: none reported, the plain callback still works
  std::vector<int32_t> plain;
  auto sub0 = engine.submit(q, [&](uint64_t, int32_t t) { plain.push_back(t); });
  const auto r0 = sub0.result.get();
  ASSERT_TRUE(r0.ok) << r0.error;
  EXPECT_TRUE(r0.output_top_logprobs.empty());
  EXPECT_EQ(plain, r.output_ids);
}

TEST(engine_top_logprobs, a_count_outside_0_to_20_fails_naming_the_field) {
  vericache::Engine engine(config());
  vericache::Request q;
  q.prompt = "x = 1";
  q.top_logprobs = 21;
  const auto r = engine.submit(q).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("field 'top_logprobs'"), std::string::npos) << r.error;
}

}  // namespace

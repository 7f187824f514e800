// The first token of a lossy or vericache request comes from the prompt's exact
// logits, which never depend on the compressed view: the prefill hands them out
// (PromptLogitsHook) before it builds the view, so the token can be emitted without
// waiting for the compression (and, with a remote store, for the publishing).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "kvtiers/compressor.hpp"
#include "runtime/generator.hpp"
#include "runtime/streamed_prefill.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

// SnapKV, counting the layers it has planned: how far the view's building had got.
class CountingPlanner final : public Compressor {
 public:
  CountingPlanner() : inner_(make_compressor("snapkv")) {}
  [[nodiscard]] std::string_view name() const override { return inner_->name(); }
  [[nodiscard]] std::string_view summary() const override { return inner_->summary(); }
  [[nodiscard]] std::vector<CompressorParam> params() const override { return inner_->params(); }
  void set_param(const std::string& n, double v) override { inner_->set_param(n, v); }
  [[nodiscard]] StatsNeeds stats_needs() const override { return inner_->stats_needs(); }
  [[nodiscard]] bool scores_tokens() const override { return inner_->scores_tokens(); }
  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    ++planned;
    return inner_->plan_layer(in);
  }
  mutable size_t planned = 0;

 private:
  std::unique_ptr<Compressor> inner_;
};

std::vector<int32_t> prompt_of(size_t n) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> d(0, 2000);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  p[0] = 2046;  // BOS
  return p;
}

TEST(first_token_before_view, the_prefill_hands_out_the_exact_logits_before_any_layer_is_compressed) {
  const auto model = test::tinycode();
  const auto prompt = prompt_of(600);
  const KvCacheConfig cfg = model->kv_config(1024, DType::bf16);
  HostFullTier tier(cfg);
  PagedKvCache cache(cfg);
  LayerStreamer stream(tier, 128);
  Workspace ws(1);
  CountingPlanner planner;
  for (const size_t cached : {size_t(0), size_t(256)}) {  // a local prefill, and one after a fetched prefix
    const uint64_t id = 1 + cached;
    tier.create(id);
    if (cached > 0)  // the prefix, as a fetch would leave it
      (void)prefill_to_tier(*model, std::span(prompt).first(cached), id, tier, stream, cache, ws, 256);
    planner.planned = 0;
    std::vector<float> early;
    size_t planned_then = 99;
    KvSequence seq;
    const PrefilledRequest p = prefill_compressed(
        *model, prompt, seq, cache, ws, planner, 4.0, 32, 256, tier, stream, id, cached,
        [&](std::span<const float> lg) {
          early.assign(lg.begin(), lg.end());
          planned_then = planner.planned;
        });
    EXPECT_EQ(planned_then, 0u) << "the hook ran after the view's building had begun";
    EXPECT_GE(planner.planned, cfg.num_layers) << "then the view was built, every layer (or slice of heads)";
    ASSERT_TRUE(p.view.has_value());
    EXPECT_EQ(early, p.logits) << "the logits handed out early are the prefill's own";
    cache.free(seq);
    tier.release(id);
  }
}

TEST(first_token_before_view, generate_emits_the_first_token_of_every_mode_as_full_decoding_does) {
  // The early first token is the same token, and the run the same, as before: each
  // mode's ids and logprobs against full decoding (vericache) or a second run
  // (lossy), greedy and seeded, and a request that stops at its first token.
  const auto model = test::tinycode();
  Generator gen(model, test::tinycode_tokenizer(), GeneratorConfig{});
  const auto prompt = prompt_of(300);
  for (const bool seeded : {false, true}) {
    GenerateOptions o;
    o.max_tokens = 12;
    o.stop_at_eos = false;
    if (seeded) {
      o.sampling.temperature = 0.8f;
      o.sampling.seed = 7;
    }
    o.mode = DecodeMode::full;
    const GenerateResult full = gen.generate(prompt, o);
    o.mode = DecodeMode::vericache;
    size_t calls = 0;
    const GenerateResult vc = gen.generate(prompt, o, [&](int32_t) { return ++calls > 0; });
    EXPECT_EQ(vc.output_ids, full.output_ids) << "seeded " << seeded;
    EXPECT_EQ(vc.output_logprobs, full.output_logprobs) << "seeded " << seeded;
    EXPECT_EQ(calls, vc.output_ids.size()) << "every token called back once";
    o.mode = DecodeMode::lossy;
    EXPECT_EQ(gen.generate(prompt, o).output_ids[0], full.output_ids[0]);
    o.max_tokens = 1;
    for (const DecodeMode m : {DecodeMode::lossy, DecodeMode::vericache}) {
      o.mode = m;
      const GenerateResult one = gen.generate(prompt, o);
      ASSERT_EQ(one.output_ids.size(), 1u);
      EXPECT_EQ(one.output_ids[0], full.output_ids[0]);
      EXPECT_EQ(one.finish_reason, "length");
    }
    o.max_tokens = 12;
    // A callback that stops the request at its first token: one token, cancelled.
    o.mode = DecodeMode::vericache;
    const GenerateResult stopped = gen.generate(prompt, o, [](int32_t) { return false; });
    EXPECT_EQ(stopped.output_ids.size(), 1u);
    EXPECT_EQ(stopped.finish_reason, "cancelled");
  }
}

}  // namespace
}  // namespace vc

// A prompt's rows may take another matrix product than decode, draft and verify
// rows (LinearBackend::linear_prompt: on a GPU, a GEMM library for prefill chunks).
// The exactness contract then rests on two things this file pins down on the CPU,
// with a backend whose prompt product truncates its rows to bf16 first (other bits
// than the step product, whichever CPU path runs): every pass that computes a prompt's KV
// takes the prompt product and no other pass does, and a prompt row's bits do not
// depend on how the prompt was cut into chunks or shared.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/dtype.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/linear_backend.hpp"
#include "tests/kernels/kernel_test_util.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

/// Step rows: the CPU's product (the CPU model's bits). Prompt rows: the same
/// product over the rows truncated to bf16 (toward zero; the avx512bf16 path rounds
/// to nearest, so that path too gets other bits): batch invariant, as a GEMM
/// library's product must be, but not the step product's bits. Counts the rows of each kind that
/// layer 0's query projection saw.
class TruncatingPromptLinear final : public LinearBackend {
 public:
  TruncatingPromptLinear(const Weight& watched, const Weight& lm_head)
      : watched_(watched.data), lm_head_(lm_head.data) {}

  [[nodiscard]] const std::string& description() const override { return name_; }

  void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (w.data == watched_) step_rows += M;
    product(x, M, w, bias, y);
  }

  void linear_prompt(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (w.data == watched_) prompt_rows += M;
    if (w.data == lm_head_) lm_head_prompt_rows += M;
    std::vector<float> rounded(x, x + M * w.cols);
    for (float& v : rounded) {
      uint32_t u = 0;
      std::memcpy(&u, &v, sizeof u);
      u &= 0xffff0000u;
      std::memcpy(&v, &u, sizeof u);
    }
    product(rounded.data(), M, w, bias, y);
  }

  std::atomic<size_t> step_rows{0}, prompt_rows{0}, lm_head_prompt_rows{0};

 private:
  static void product(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) {
    std::vector<float> b;
    if (bias.present()) {
      b.resize(bias.cols);
      to_f32(bias.dtype, bias.data, b.data(), b.size());
    }
    cpu::matmul(x, M, w.cols, w.data, w.dtype, w.rows, b.empty() ? nullptr : b.data(), y, nullptr);
  }

  const void* watched_;
  const void* lm_head_;
  std::string name_ = "host (prompt rows truncated to bf16)";
};

std::shared_ptr<TruncatingPromptLinear> backend_for(const Model& m) {
  return std::make_shared<TruncatingPromptLinear>(m.weights().layers.at(0).wq, m.weights().lm_head);
}

Generator make_generator(std::shared_ptr<const Model> m, const std::string& remote_url = "",
                         bool compressed_first = true) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  gc.remote_url = remote_url;
  gc.remote_chunk_tokens = 128;
  gc.remote_compressed_first = compressed_first;
  return Generator(std::move(m), test::tinycode_tokenizer(), gc);
}

std::vector<int32_t> golden_prompt(size_t i) {
  return test::golden()["cases"][i]["prompt_ids"].get<std::vector<int32_t>>();
}

TEST(prompt_products, prompt_rows_take_the_prompt_product_and_every_other_row_the_step_product) {
  const auto cpu = test::tinycode();
  const auto backend = backend_for(*cpu);
  const auto model = Model::with_backends(cpu, backend, nullptr);
  auto gen = make_generator(model);
  const auto prompt = golden_prompt(3);
  GenerateOptions o;
  o.max_tokens = 20;
  o.stop_at_eos = false;
  const GenerateResult full = gen.generate(prompt, o);
  ASSERT_EQ(full.output_ids.size(), 20u);
  EXPECT_EQ(backend->prompt_rows.load(), prompt.size()) << "each prompt token once";
  EXPECT_EQ(backend->step_rows.load(), 19u) << "each decode step's token once (the first came from the prefill)";

  // The truncation changes the prompt's KV: the tests below could fail.
  auto cpu_gen = make_generator(cpu);
  const GenerateResult on_cpu = cpu_gen.generate(prompt, o);
  EXPECT_NE(0, std::memcmp(on_cpu.output_logprobs.data(), full.output_logprobs.data(),
                           full.output_logprobs.size() * sizeof(float)))
      << "truncated prompt rows gave the CPU's bits";

  // vericache: the drafter's prefill and the full tier's are prompt rows, drafts and
  // verify passes step rows (at least one per generated token).
  backend->prompt_rows = 0;
  backend->step_rows = 0;
  o.mode = DecodeMode::vericache;
  o.draft_length = 8;
  (void)gen.generate(prompt, o);
  EXPECT_EQ(backend->prompt_rows.load(), prompt.size()) << "the prompt is computed once";
  EXPECT_GE(backend->step_rows.load(), 19u);
  EXPECT_EQ(backend->lm_head_prompt_rows.load(), 0u) << "the LM head takes the step product";
}

TEST(prompt_products, a_model_names_how_it_computes_and_its_backends_say_theirs) {
  const auto cpu = test::tinycode();
  const std::string plain = cpu->numerics();
  const cpu::SimdPath before = cpu::active_simd_path();
  EXPECT_EQ(plain.rfind("cpu ", 0), 0u) << plain;
  const auto with = Model::with_backends(cpu, backend_for(*cpu), nullptr);
  EXPECT_NE(with->numerics().find("products host (prompt rows truncated to bf16)"), std::string::npos)
      << with->numerics();
  {
    const test::SimdPathGuard guard;  // another SIMD path: other bits, another name
    cpu::set_simd_path(before == cpu::SimdPath::scalar ? cpu::SimdPath::avx2 : cpu::SimdPath::scalar);
    if (cpu::active_simd_path() != before) {
      EXPECT_NE(cpu->numerics(), plain);
    } else {
      ADD_FAILURE() << "no second SIMD path to switch to";
    }
  }
  EXPECT_EQ(cpu->numerics(), plain);
}

TEST(prompt_products, vericache_equals_full_decoding_when_prompt_rows_take_another_product) {
  const auto cpu = test::tinycode();
  const auto model = Model::with_backends(cpu, backend_for(*cpu), nullptr);
  auto gen = make_generator(model);
  const auto prompt = golden_prompt(3);
  for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 1234}}) {
    GenerateOptions base;
    base.max_tokens = 24;
    base.sampling = sp;
    base.stop_at_eos = false;
    const GenerateResult want = gen.generate(prompt, base);
    for (const auto& m : compressor_names()) {
      for (const bool hierarchy : {false, true}) {
        GenerateOptions o = base;
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.draft_auto = hierarchy;
        o.draft_length = 8;
        if (hierarchy) o.draft_hierarchy = DraftHierarchy::ngram;
        const std::string what = m + (sp.temperature > 0 ? " sampled" : " greedy") +
                                 (hierarchy ? ", draft auto + n-gram level" : ", draft 8");
        test::expect_identical(want, gen.generate(prompt, o), what);
      }
    }
  }
}

TEST(prompt_products, a_prompt_row_has_the_same_bits_however_the_prompt_is_chunked_or_shared) {
  const auto cpu = test::tinycode();
  std::mt19937 rng(5);
  const auto prefix = test::random_tokens(rng, 150, 2048, 2046);
  auto a = prefix, b = prefix;
  for (const int32_t t : test::random_tokens(rng, 41, 2048, -1)) a.push_back(t);
  for (const int32_t t : test::random_tokens(rng, 67, 2048, -1)) b.push_back(t);

  const auto backend = backend_for(*cpu);
  const auto model = Model::with_backends(cpu, backend, nullptr);
  Workspace ws(2);
  PagedKvCache alone(model->kv_config(1024, DType::bf16, 16));
  KvSequence sb;
  const std::vector<float> want = prefill(*model, b, sb, alone, ws, 256);
  EXPECT_EQ(backend->prompt_rows.load(), b.size());
  EXPECT_EQ(backend->step_rows.load(), 0u);
  for (const size_t chunk : {size_t(1), size_t(7), size_t(64)}) {
    PagedKvCache c(model->kv_config(1024, DType::bf16, 16));
    KvSequence s;
    const std::vector<float> got = prefill(*model, b, s, c, ws, chunk);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "chunks of " << chunk;
  }
  // b after a, sharing a's first 144 positions (whole blocks): b's suffix rows start
  // at another place in their chunks.
  PagedKvCache shared(model->kv_config(1024, DType::bf16, 16));
  KvSequence sa, sb2;
  backend->prompt_rows = 0;
  (void)prefill(*model, a, sa, shared, ws, 256);
  const std::vector<float> got = prefill(*model, b, sb2, shared, ws, 256);
  EXPECT_EQ(backend->prompt_rows.load(), a.size() + b.size() - 144) << "b computes its 9 blocks past the shared ones";
  EXPECT_EQ(backend->step_rows.load(), 0u);
  EXPECT_EQ(sa.blocks[0], sb2.blocks[0]) << "the prefix was not shared";
  EXPECT_EQ(shared.pool().refcount(sa.blocks[0]), 2);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

TEST(prompt_products, the_engines_drafter_runs_a_prompts_rows_as_prompt_rows_local_or_compressed_first) {
  const auto cpu = test::tinycode();
  const auto backend = backend_for(*cpu);
  const auto model = Model::with_backends(cpu, backend, nullptr);
  std::mt19937 rng(9);
  const size_t n = 80, covered = 64;
  const auto prompt = test::random_tokens(rng, n, cpu->config().vocab_size, cpu->config().bos_token_id);
  DraftSpec s;
  s.id = 1;
  s.prompt = prompt;
  s.mode = DecodeMode::vericache;
  s.compressor = "snapkv";
  s.ratio = 4.0;
  s.max_new_tokens = 8;
  s.copy_view = true;
  std::shared_ptr<const CompressedView> head;
  {
    HostFullTier tier(model->kv_config(16, DType::bf16));
    DraftBatcher b(model, &tier, 4096, DType::bf16, 2);
    const PrefillResult r = b.prefill(s);
    EXPECT_EQ(backend->prompt_rows.load(), n) << "a local prefill";
    std::string why;
    auto h = r.views.at(0)->slice(0, covered, why);
    ASSERT_TRUE(h) << why;
    head = std::make_shared<const CompressedView>(std::move(*h));
    b.release(1);
  }
  // Compressed first: the drafter's pass over the suffix after the fetched view, then
  // the exact prefill (no full chunk cached: the whole prompt).
  backend->prompt_rows = 0;
  backend->step_rows = 0;
  HostFullTier tier(model->kv_config(16, DType::bf16));
  DraftBatcher b(model, &tier, 4096, DType::bf16, 2);
  s.id = 7;
  s.copy_view = false;
  s.fetched_views = {head};
  s.tier_ready = true;
  const PrefillResult guess = b.prefill(s);
  EXPECT_TRUE(guess.exact_pending);
  EXPECT_EQ(backend->prompt_rows.load(), n - covered);
  tier.create(7, n + 32);
  (void)b.finish_prefill(7, 0);
  EXPECT_EQ(backend->prompt_rows.load(), n - covered + n);
  EXPECT_EQ(backend->step_rows.load(), 0u);
  b.release(7);
}

size_t stored_chunks(const std::string& url) {
  RedisClient c(parse_redis_url(url));
  return c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "100000"}).elements.at(1).elements.size();
}

TEST(prompt_products, a_prefix_fetched_from_the_store_gives_the_bits_of_a_local_prefill) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const auto cpu = test::tinycode();
  const auto backend = backend_for(*cpu);
  const auto model = Model::with_backends(cpu, backend, nullptr);
  const auto prompt = golden_prompt(0).size() > golden_prompt(3).size() ? golden_prompt(0) : golden_prompt(3);
  ASSERT_GT(prompt.size(), 256u);
  GenerateOptions o;
  o.max_tokens = 16;
  o.stop_at_eos = false;
  o.mode = DecodeMode::vericache;
  o.draft_length = 8;
  auto local = make_generator(model);
  const GenerateResult want = local.generate(prompt, o);
  {
    auto cold = make_generator(model, server.url());
    test::expect_identical(want, cold.generate(prompt, o), "publishing run");
  }
  // (the cold generator's tier sent every queued chunk before it was destroyed)
  ASSERT_GE(stored_chunks(server.url()), 2 * (prompt.size() / 128)) << "full and compressed chunks";
  for (const bool compressed_first : {false, true}) {
    auto warm = make_generator(model, server.url(), compressed_first);
    backend->prompt_rows = 0;
    const GenerateResult r = warm.generate(prompt, o);
    const std::string what = compressed_first ? "compressed first" : "full chunks";
    EXPECT_GT(r.stats.remote_chunks_hit, 0u) << what;
    EXPECT_EQ(r.stats.remote_compressed_first, compressed_first) << r.stats.remote_compressed_stop_reason;
    // The chunks were a prompt's rows where they were computed, and the suffix
    // prefilled after them starts mid-chunk of a local prefill.
    test::expect_identical(want, r, what);
    // Prompt rows: the exact suffix after the full chunks, and with compressed first
    // the drafter's pass over the suffix after the compressed chunks too (skipped
    // when the full chunks came first).
    EXPECT_EQ(backend->prompt_rows.load(),
              prompt.size() - r.stats.remote_positions + r.stats.remote_suffix_drafted)
        << what;
    if (!compressed_first) {
      EXPECT_EQ(r.stats.remote_suffix_drafted, 0u);
    }
  }
  // KV computed another way (here: the CPU's products for the prompt rows too) is
  // under other keys: a CPU model finds none of these chunks, and gives its own bits.
  auto on_cpu = make_generator(cpu, server.url());
  const GenerateResult r = on_cpu.generate(prompt, o);
  EXPECT_EQ(r.stats.remote_chunks_hit, 0u) << "chunks of other numerics were taken";
  EXPECT_NE(r.stats.remote_stop_reason.find("chunk 0 not in the store"), std::string::npos)
      << r.stats.remote_stop_reason;
  auto cpu_local = make_generator(cpu);
  test::expect_identical(cpu_local.generate(prompt, o), r, "the CPU model");
}

}  // namespace
}  // namespace vc

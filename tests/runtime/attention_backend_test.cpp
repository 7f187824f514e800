// forward()'s hand-off to an AttentionBackend (runtime/attention_backend.hpp), the
// seam `--device cuda` attends through, checked where no GPU is: a backend on the
// host that keeps its own copies (the cache's, refreshed through KvMirror; verify
// chunks and views' kept rows copied per pass) and attends over them with the CPU's
// attention_row / attention_row_mixed. Its bits are the CPU's, so a model that
// attends through it must give exactly the CPU model's output -- full decoding over
// the paged cache, vericache verifying over the full KV streamed in chunks, drafts
// over token-dropping views (same rounds) -- and the backend must have seen every
// kind of pass. The CUDA backend itself is tested in tests/cuda and cuda_device.
#include "runtime/attention_backend.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <random>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/full_tier.hpp"
#include "kernels/cpu/attention_mixed.hpp"
#include "kvtiers/kv_mirror.hpp"
#include "kvtiers/packed_kv.hpp"
#include "runtime/generator.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/streamed_prefill.hpp"
#include "runtime/verifier.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/host_staging_attention.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

using test::HostStagingAttention;

Generator make_generator(std::shared_ptr<const Model> m, size_t stage_positions) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  gc.stage_positions = stage_positions;  // 64: a verify pass stages its KV a block at a time
  return Generator(std::move(m), test::tinycode_tokenizer(), gc);
}

TEST(attention_backend, a_model_attending_through_a_backend_gives_the_cpu_models_output_bit_for_bit) {
  auto backend = std::make_shared<HostStagingAttention>();
  const auto staged = Model::with_backends(test::tinycode(), nullptr, backend);
  auto cpu_gen = make_generator(test::tinycode(), 64);
  auto staged_gen = make_generator(staged, 64);
  const auto prompt = test::golden()["cases"][3]["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<std::string> methods = compressor_names();  // kvzip's statistics included
  for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 1234}}) {
    GenerateOptions base;
    base.max_tokens = 24;
    base.sampling = sp;
    base.stop_at_eos = false;
    const auto want = cpu_gen.generate(prompt, base);
    test::expect_identical(want, staged_gen.generate(prompt, base), "full");
    for (const auto& m : methods) {
      GenerateOptions o = base;
      o.mode = DecodeMode::vericache;
      o.compressor = m;
      o.draft_length = 8;
      const std::string what = m + (sp.temperature > 0 ? " sampled" : " greedy");
      const auto cpu_r = cpu_gen.generate(prompt, o);
      const auto staged_r = staged_gen.generate(prompt, o);
      test::expect_identical(cpu_r, staged_r, what + " (against the CPU model's vericache)");
      // Draft rows through the backend give the CPU's drafts: the same rounds.
      EXPECT_EQ(cpu_r.stats.drafted, staged_r.stats.drafted) << what;
      EXPECT_EQ(cpu_r.stats.accepted, staged_r.stats.accepted) << what;
      test::expect_identical(want, staged_r, what + " (against full decoding)");
    }
  }
  // Prefill chunks and decode steps over the cache, verify passes over streamed
  // chunks: every kind went through the backend, many chunks per verify pass; and
  // the copy of the cache refreshed a block when it was written, not each time a
  // row read it (decode steps read every block, and write one).
  EXPECT_GT(backend->passes.load(), 0u);
  EXPECT_GT(backend->chunked_passes.load(), 0u);
  EXPECT_GT(backend->deferred_adds.load(), 0u);  // lent chunks, copied after add() returned
  // Verify passes gave their queries first and their blocks in the order a ring of
  // two attention chunks can take (the CUDA pass's rule), over more than two chunks.
  EXPECT_GT(backend->chunked_ring_passes.load(), 0u);
  EXPECT_GT(backend->cached_rows.load(), 0u);
  EXPECT_GT(backend->view_rows.load(), 0u);  // draft rows over views
  EXPECT_GT(backend->packed_prefixes.load(), 0u);  // quantized views' sides among them
  // A view's kept rows went to the backend once per layer, not with every pass.
  EXPECT_LT(backend->view_layer_copies.load() * 8, backend->view_passes.load());
  EXPECT_GT(backend->blocks_copied.load(), 0u);
  EXPECT_LT(backend->blocks_copied.load() * 3, backend->blocks_read.load());
  // What the backend holds is what the model reports as device memory; on the CPU, none.
  EXPECT_GT(staged->device_bytes(), 0u);
  EXPECT_EQ(staged->device_bytes(), backend->device_bytes());
  EXPECT_EQ(test::tinycode()->device_bytes(), 0u);
}

TEST(attention_backend, a_batched_verify_pass_through_a_backend_gives_each_request_its_cpu_pass_alone) {
  // Several requests' rows in one forward, each over its own streamed full KV: the
  // backend's passes start at the request's first row of the pass.
  const auto cpu_model = test::tinycode();
  auto backend = std::make_shared<HostStagingAttention>();
  const auto staged = Model::with_backends(cpu_model, nullptr, backend);
  HostFullTier tier(cpu_model->kv_config(16, DType::bf16));
  std::vector<VerifyJob> jobs;
  std::mt19937 rng(21);
  for (uint64_t id = 1; id <= 3; ++id) {
    const auto prompt = test::random_tokens(rng, 90 + 130 * id, cpu_model->config().vocab_size,
                                            cpu_model->config().bos_token_id);
    PagedKvCache scratch(cpu_model->kv_config(16, DType::bf16));
    LayerStreamer stream(tier, 256);
    Workspace ws(1);
    tier.create(id);
    (void)prefill_to_tier(*cpu_model, prompt, id, tier, stream, scratch, ws, 256);
    VerifyJob j;
    j.id = id;
    j.t0 = int32_t(id) + 40;
    j.p0 = prompt.size();
    for (size_t d = 0; d < 2 + 3 * id; ++d) j.drafts.push_back(int32_t(rng() % 500) + 3);
    jobs.push_back(j);
  }
  Verifier cpu_verifier(cpu_model, 2), staged_verifier(staged, 2);
  std::vector<std::unique_ptr<LayerStreamer>> owned;
  std::vector<LayerStreamer*> streams;
  for (const VerifyJob& j : jobs) {
    owned.push_back(std::make_unique<LayerStreamer>(tier, 128));  // several chunks each
    owned.back()->start(j.id, j.p0, j.drafts.size() + 1);
    streams.push_back(owned.back().get());
  }
  const std::vector<VerifyOutcome> got = staged_verifier.run_batch(jobs, streams);
  ASSERT_EQ(got.size(), jobs.size());
  for (size_t k = 0; k < jobs.size(); ++k) {
    LayerStreamer s(tier, 256);
    s.start(jobs[k].id, jobs[k].p0, jobs[k].drafts.size() + 1);
    const VerifyOutcome want = cpu_verifier.run(jobs[k], s);
    const std::string what = "request " + std::to_string(jobs[k].id);
    EXPECT_EQ(got[k].tokens, want.tokens) << what;
    ASSERT_EQ(got[k].logprobs.size(), want.logprobs.size()) << what;
    EXPECT_EQ(0, std::memcmp(got[k].logprobs.data(), want.logprobs.data(),
                             want.logprobs.size() * sizeof(float))) << what;
    ASSERT_EQ(got[k].rows_k.size(), want.rows_k.size()) << what;
    EXPECT_EQ(0, std::memcmp(got[k].rows_k.data(), want.rows_k.data(),
                             want.rows_k.size() * sizeof(float))) << what;
  }
  EXPECT_GT(backend->chunked_passes.load(), 0u);
  // Chunks the host tier lent in place were copied after add() returned, as a
  // device copies them, and still held the bytes the CPU pass read.
  EXPECT_GT(backend->deferred_adds.load(), 0u);
}

TEST(attention_backend, with_backends_refuses_a_model_already_placed) {
  auto backend = std::make_shared<HostStagingAttention>();
  const auto staged = Model::with_backends(test::tinycode(), nullptr, backend);
  EXPECT_THROW((void)Model::with_backends(staged, nullptr, backend), Error);
  EXPECT_THROW((void)Model::with_backends(nullptr, nullptr, backend), Error);
}

}  // namespace
}  // namespace vc

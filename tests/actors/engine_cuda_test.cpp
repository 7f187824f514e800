// The actor engine on a GPU (EngineConfig::device = "cuda:0"): requests served at
// once -- every compressor, ratios 2x-8x, draft lengths 1 to auto, greedy and
// seeded, some in full mode -- each give, bit for bit, the output of full decoding
// of that request alone on the same GPU: the exactness matrix's concurrency axis on
// the GPU backend (its rows batched with other requests' in one forward, drafts over
// views in HBM, verify passes staged from the full tier). Skipped, saying why, where
// no GPU can be used. Also: with no fast_memory_bytes, the budget is the GPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <random>
#include <string>
#include <vector>
#include <vericache/engine.hpp>

#include "kernels/error.hpp"
#include "runtime/device.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

/// The bundled model on cuda:0, or the reason it cannot be placed there.
std::shared_ptr<const vc::Model> on_gpu(std::string& why) {
  try {
    static auto m = vc::Model::on_device(vc::test::tinycode(), vc::parse_device("cuda:0"));
    return m;
  } catch (const vc::Error& e) {
    why = e.what();
    return nullptr;
  }
}

TEST(cuda_engine, requests_served_at_once_on_the_gpu_match_their_full_decoding_alone_bit_for_bit) {
  std::string why;
  const auto gpu = on_gpu(why);
  if (!gpu) GTEST_SKIP() << "no GPU to place the model on: " << why;
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator alone(gpu, vc::test::tinycode_tokenizer(), gc);
  const char* methods[] = {"streaming_llm", "snapkv", "h2o", "expected_attention", "kvzip",
                           "laprox", "kivi", "kvquant", "rotate_kv", "snapkv+kivi", "kvzap"};
  const char* drafts[] = {"1", "4", "16", "30", "auto"};
  std::mt19937 rng(2026);
  const auto& cfg = gpu->config();
  std::vector<vericache::Request> reqs(12);
  std::vector<vc::GenerateResult> want;
  for (size_t i = 0; i < reqs.size(); ++i) {
    vericache::Request& r = reqs[i];
    r.prompt_ids = vc::test::random_tokens(rng, 20 + rng() % 300, cfg.vocab_size, cfg.bos_token_id);
    r.max_tokens = 16 + int(rng() % 40);
    r.mode = i % 6 == 5 ? "full" : "vericache";
    r.compressor = methods[i % std::size(methods)];
    r.ratio = double(2 << (rng() % 3));
    r.draft = drafts[rng() % std::size(drafts)];
    r.ignore_eos = true;
    if (i % 2 == 1) r.temperature = 0.8f, r.top_k = 50, r.seed = rng();
    vc::GenerateOptions o;
    o.max_tokens = r.max_tokens;
    o.stop_at_eos = false;
    o.sampling = {r.temperature, r.top_k, r.top_p, r.seed};
    want.push_back(alone.generate(r.prompt_ids, o));
  }
  vericache::EngineConfig ec;
  ec.model_dir = vc::test::model_dir();  // VC_TEST_MODEL_DIR where the binary was built elsewhere
  ec.device = "cuda:0";
  ec.max_active = reqs.size();
  vericache::Engine engine(ec);
  std::vector<vericache::Engine::Submission> subs;
  for (const auto& r : reqs) subs.push_back(engine.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto got = subs[i].result.get();
    const std::string what = "request " + std::to_string(i) + " (" + reqs[i].mode + " " +
                             reqs[i].compressor + " " + std::to_string(reqs[i].ratio) + "x draft " +
                             reqs[i].draft + ")";
    ASSERT_TRUE(got.ok) << what << ": " << got.error;
    EXPECT_EQ(got.output_ids, want[i].output_ids) << what;
    EXPECT_EQ(got.output_logprobs, want[i].output_logprobs) << what;
  }
}

TEST(cuda_engine, on_the_gpu_the_default_budget_is_what_the_device_has_free_within_the_utilization) {
  std::string why;
  if (!on_gpu(why)) GTEST_SKIP() << "no GPU to place the model on: " << why;
  vericache::EngineConfig ec;
  ec.model_dir = vc::test::model_dir();
  ec.device = "cuda:0";  // no fast_memory_bytes: the device's memory sets the budget
  // A share small enough that the device's figure, not the host's cap, sets it.
  ec.gpu_memory_utilization = 0.3;
  const vc::DeviceMemory before = vc::cuda_memory(0);
  const double share = std::floor(0.3 * double(before.total)) - double(before.total - before.free);
  ASSERT_GT(share, double(size_t(2) << 30)) << "this GPU has too little free memory for the test";
  {
    vericache::Engine engine(ec);
    const vericache::EngineStats st = engine.stats();
    const size_t budget = st.fast_memory_budget;
    // Half of what the share leaves once the engine's weights (and buffers) are on the
    // device: below half of what it left before, by at most what the engine holds
    // there and 1 GiB (a CUDA context, cuBLAS's handles).
    EXPECT_LT(double(budget), share / 2) << "the engine's own weights come out of what was free";
    EXPECT_GT(double(budget), share / 2 - double(st.device_bytes) / 2 - double(size_t(1) << 30));
    vericache::Request r;
    std::mt19937 rng(7);
    r.prompt_ids = vc::test::random_tokens(rng, 200, on_gpu(why)->config().vocab_size,
                                           on_gpu(why)->config().bos_token_id);
    r.max_tokens = 16;
    r.mode = "vericache";
    r.compressor = "snapkv";
    r.ignore_eos = true;
    const auto got = engine.submit(r).result.get();
    ASSERT_TRUE(got.ok) << got.error;
    EXPECT_EQ(got.output_ids.size(), 16u);
  }
  ec.gpu_memory_utilization = 1e-6;  // less than the weights alone
  try {
    vericache::Engine engine(ec);
    ADD_FAILURE() << "an engine started with no device memory left for its KV";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_memory_utilization"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace

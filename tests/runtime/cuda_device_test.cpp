// The model's passes on a GPU (Model::on_device, --device cuda: rows kept on the
// device, runtime/device_rows.hpp; products, norms, RoPE, attention there): against
// the float64 reference within the f32 paths' tolerance,
// batch invariant bit for bit, and vericache (verify passes over the full KV staged
// chunk by chunk from a full tier) equal to full decoding (attention over the paged
// cache) bit for bit on the GPU, as on the CPU.
// Skipped, saying why, where no GPU can be used.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/tp_comm.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/golden_check.hpp"

namespace vc {
namespace {

/// The bundled model on cuda:0, or the reason it cannot be placed there.
std::shared_ptr<const Model> on_gpu(std::string& why) {
  try {
    static auto m = Model::on_device(test::tinycode(), parse_device("cuda:0"));
    return m;
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

#define VC_REQUIRE_GPU_MODEL(var)                                        \
  std::string vc_why_;                                                   \
  const auto var = on_gpu(vc_why_);                                      \
  if (!var) GTEST_SKIP() << "no GPU to place the model on: " << vc_why_

Generator make_generator(std::shared_ptr<const Model> m, GeneratorConfig gc = {}) {
  gc.max_context = 2048;
  return Generator(std::move(m), test::tinycode_tokenizer(), gc);
}

TEST(cuda_device, the_forward_pass_matches_the_float64_reference_within_the_f32_tolerance) {
  VC_REQUIRE_GPU_MODEL(gpu);
  std::printf("  weight products on %s\n", gpu->linear_backend()->description().c_str());
  test::check_against_golden({DType::f32, 1e-4f}, gpu);  // the CPU's f32 paths' bound
}

TEST(cuda_device, a_gpu_model_keeps_its_passes_rows_on_the_device) {
  // Every pass of the placed model runs with its rows on the device (the golden
  // comparison above and every test below go through them), and its numerics say
  // so: KV computed the other way is not taken for its own.
  VC_REQUIRE_GPU_MODEL(gpu);
  EXPECT_NE(gpu->linear_backend()->rows(), nullptr);
  EXPECT_NE(gpu->numerics().find("whole passes on the device"), std::string::npos) << gpu->numerics();
  EXPECT_GT(gpu->device_bytes(), test::tinycode()->weight_bytes_per_step() / 2) << "the weights are there";
}

TEST(cuda_device, a_row_gives_the_same_bits_alone_and_in_a_batch_of_other_sequences) {
  VC_REQUIRE_GPU_MODEL(gpu);
  auto gen = make_generator(gpu);
  std::mt19937 rng(5);
  const ModelConfig& c = gpu->config();
  std::vector<KvSequence> seqs(3);
  std::vector<std::vector<float>> alone(3);
  std::vector<int32_t> next(3), pos(3);
  for (size_t s = 0; s < 3; ++s) {
    const auto ids = test::random_tokens(rng, 30 + 17 * s, c.vocab_size, c.bos_token_id);
    (void)prefill(*gpu, ids, seqs[s], gen.cache(), gen.workspace());
    next[s] = ids[s];
    pos[s] = int32_t(seqs[s].length);
    gen.cache().reserve(seqs[s], seqs[s].length + 1);
    ForwardRow row{next[s], pos[s], &seqs[s], true};
    forward(*gpu, std::span(&row, 1), gen.cache(), gen.workspace(), alone[s]);
  }
  // The same rows again (each position rewritten with the same K/V), in one pass.
  std::vector<ForwardRow> rows;
  for (size_t s = 0; s < 3; ++s) rows.push_back({next[s], pos[s], &seqs[s], true});
  std::vector<float> batched;
  forward(*gpu, rows, gen.cache(), gen.workspace(), batched);
  const size_t V = size_t(c.vocab_size);
  for (size_t s = 0; s < 3; ++s)
    EXPECT_EQ(0, std::memcmp(alone[s].data(), batched.data() + s * V, V * sizeof(float)))
        << "sequence " << s << ": its logits differ in some bit between a pass alone and the batch";
  for (auto& s : seqs) gen.cache().free(s);
}

TEST(cuda_device, vericache_equals_full_decoding_bit_for_bit_for_every_compressor) {
  VC_REQUIRE_GPU_MODEL(gpu);
  auto gen = make_generator(gpu);
  const auto prompt = test::golden()["cases"][0]["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<std::string> methods = compressor_names();
  methods.push_back("snapkv+kivi");
  for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 1234}}) {
    GenerateOptions base;
    base.max_tokens = 40;
    base.sampling = sp;
    base.stop_at_eos = false;
    const auto full = gen.generate(prompt, base);
    for (const auto& m : methods)
      for (int draft : {1, 16, -1}) {
        GenerateOptions o = base;
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.draft_auto = draft < 0;
        o.draft_length = size_t(std::max(draft, 0));
        const auto r = gen.generate(prompt, o);
        const std::string what = m + " draft " + (draft < 0 ? "auto" : std::to_string(draft)) +
                                 (sp.temperature > 0 ? " sampled" : " greedy");
        test::expect_identical(full, r, what);
      }
  }
}

TEST(cuda_device, drafts_over_quantized_views_on_the_gpu_are_accepted_about_as_often_as_the_cpus) {
  // The drafter's kernel dequantizes KIVI / KVQuant (keys RoPE'd from their
  // positions) / RotateKV (Hadamard) codes itself: a wrong table, transform or
  // offset would draft noise, which verification rejects (output still exact) but
  // which shows here as far fewer accepted tokens than the CPU drafter's.
  VC_REQUIRE_GPU_MODEL(gpu);
  auto gpu_gen = make_generator(gpu);
  auto cpu_gen = make_generator(test::tinycode());
  const auto prompt = test::golden()["cases"][0]["prompt_ids"].get<std::vector<int32_t>>();
  for (const char* m : {"kivi", "kvquant", "rotate_kv", "snapkv+kivi"}) {
    GenerateOptions o;
    o.max_tokens = 64;
    o.stop_at_eos = false;
    o.mode = DecodeMode::vericache;
    o.compressor = m;
    o.draft_length = 8;
    const auto on_cpu = cpu_gen.generate(prompt, o);
    const auto on_gpu = gpu_gen.generate(prompt, o);
    EXPECT_GE(double(on_gpu.stats.accepted), 0.8 * double(on_cpu.stats.accepted))
        << m << ": " << on_gpu.stats.accepted << " accepted on the GPU, " << on_cpu.stats.accepted
        << " on the CPU";
  }
}

TEST(cuda_device, vericache_equals_full_decoding_with_the_full_kv_streamed_from_disk_a_block_at_a_time) {
  VC_REQUIRE_GPU_MODEL(gpu);
  GeneratorConfig gc;
  gc.full_tier = "disk";
  gc.stage_positions = 64;  // one block per chunk: a verify pass stages many chunks
  for (const DType kv : {DType::bf16, DType::f32}) {
    gc.kv_dtype = kv;
    auto gen = make_generator(gpu, gc);  // a 257-token prompt: 5-6 chunks per verify pass
    const auto prompt = test::golden()["cases"][3]["prompt_ids"].get<std::vector<int32_t>>();
    GenerateOptions base;
    base.max_tokens = 40;
    base.stop_at_eos = false;
    const auto full = gen.generate(prompt, base);
    for (const char* m : {"snapkv", "kivi"}) {
      GenerateOptions o = base;
      o.mode = DecodeMode::vericache;
      o.compressor = m;
      o.draft_length = 8;
      test::expect_identical(full, gen.generate(prompt, o),
                             std::string(m) + (kv == DType::f32 ? " f32 KV" : " bf16 KV"));
    }
  }
}

TEST(cuda_device, placing_a_gpu_model_on_the_cpu_gives_the_model_it_was_placed_from) {
  VC_REQUIRE_GPU_MODEL(gpu);
  EXPECT_EQ(gpu->device().str(), "cuda:0");
  EXPECT_EQ(Model::on_device(gpu, parse_device("cpu")), test::tinycode());
  EXPECT_EQ(Model::on_device(gpu, parse_device("cuda:0")), gpu);
}

TEST(cuda_device, a_model_on_a_gpu_is_not_sharded_for_tensor_parallelism) {
  VC_REQUIRE_GPU_MODEL(gpu);
  EXPECT_THROW((void)Model::shard(gpu, 0, std::make_shared<CpuCommunicator>(2)), Error);
}

}  // namespace
}  // namespace vc

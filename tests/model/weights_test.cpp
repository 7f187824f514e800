// Tests of weight binding: the bundled model, the per-architecture test checkpoints,
// random checkpoints that round-trip exactly, and each mismatch with the config.
#include "runtime/model/weights.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "tests/model/checkpoint_writer.hpp"

namespace vc {
namespace {

using nlohmann::json;
using testkit::contains_all;
using testkit::error_of;
using testkit::TempDir;

/// Checks that every weight of `w` has the dtype and shape implied by `c`.
void expect_bound(const ModelConfig& c, const ModelWeights& w, DType dtype) {
  auto check = [&](const Weight& x, size_t rows, size_t cols, const std::string& what) {
    EXPECT_TRUE(x.present()) << what;
    EXPECT_EQ(x.dtype, dtype) << what;
    EXPECT_EQ(x.rows, rows) << what;
    EXPECT_EQ(x.cols, cols) << what;
  };
  const size_t h = size_t(c.hidden_size), q = size_t(c.q_dim()), kv = size_t(c.kv_dim());
  const size_t inter = size_t(c.intermediate_size), hd = size_t(c.head_dim);
  EXPECT_EQ(w.dtype, dtype);
  check(w.embed, size_t(c.vocab_size), h, "embed");
  check(w.final_norm, 1, h, "final_norm");
  check(w.lm_head, size_t(c.vocab_size), h, "lm_head");
  EXPECT_EQ(w.lm_head.data == w.embed.data, c.tie_word_embeddings);
  ASSERT_EQ(w.layers.size(), size_t(c.num_layers));
  for (const LayerWeights& l : w.layers) {
    check(l.attn_norm, 1, h, "attn_norm");
    check(l.wq, q, h, "wq");
    check(l.wk, kv, h, "wk");
    check(l.wv, kv, h, "wv");
    check(l.wo, h, q, "wo");
    check(l.mlp_norm, 1, h, "mlp_norm");
    check(l.w_gate, inter, h, "w_gate");
    check(l.w_up, inter, h, "w_up");
    check(l.w_down, h, inter, "w_down");
    EXPECT_EQ(l.bq.present(), c.attention_bias);
    if (c.attention_bias) {
      check(l.bq, 1, q, "bq");
      check(l.bk, 1, kv, "bk");
      check(l.bv, 1, kv, "bv");
    }
    EXPECT_EQ(l.q_norm.present(), c.qk_norm);
    if (c.qk_norm) {
      check(l.q_norm, 1, hd, "q_norm");
      check(l.k_norm, 1, hd, "k_norm");
    }
  }
}

std::string arch_dir(const std::string& name) {
  return std::string(VC_TEST_DATA_DIR) + "/archs/" + name;
}

TEST(weights, binds_the_bundled_tinycode_model) {
  const ModelConfig c = load_model_config(std::string(VC_MODEL_DIR) + "/config.json");
  const ModelWeights w = load_weights(c, VC_MODEL_DIR);
  expect_bound(c, w, DType::bf16);
  EXPECT_EQ(w.layers.size(), 6u);
  EXPECT_EQ(w.layers[0].wk.rows, 128u);
  EXPECT_EQ(w.checkpoint.tensor_count(), 3u + 6u * 9u);
}

TEST(weights, binds_the_llama3_rope_scaling_checkpoint) {
  const ModelConfig c = load_model_config(arch_dir("llama3-rope-scaling") + "/config.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.tie_word_embeddings);
  expect_bound(c, load_weights(c, arch_dir("llama3-rope-scaling")), DType::bf16);
}

TEST(weights, binds_the_sharded_f16_mistral_checkpoint) {
  const ModelConfig c = load_model_config(arch_dir("mistral-sharded-f16") + "/config.json");
  EXPECT_EQ(c.arch, Arch::mistral);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_FALSE(c.dtype_given);  // so the checkpoint's own F16 is used
  const ModelWeights w = load_weights(c, arch_dir("mistral-sharded-f16"));
  EXPECT_EQ(w.checkpoint.file_count(), 3u);
  expect_bound(c, w, DType::f16);
}

TEST(weights, binds_the_tied_f32_qwen2_checkpoint_with_biases) {
  const ModelConfig c = load_model_config(arch_dir("qwen2-bias-tied") + "/config.json");
  EXPECT_EQ(c.arch, Arch::qwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  const ModelWeights w = load_weights(c, arch_dir("qwen2-bias-tied"));
  expect_bound(c, w, DType::f32);
  EXPECT_EQ(w.checkpoint.find("lm_head.weight"), nullptr);
}

TEST(weights, binds_the_qwen3_checkpoint_whose_head_dim_is_not_hidden_over_heads) {
  const ModelConfig c = load_model_config(arch_dir("qwen3-qknorm") + "/config.json");
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  expect_bound(c, load_weights(c, arch_dir("qwen3-qknorm")), DType::bf16);
}

/// `w` holds exactly the bytes (and so the values) `t` was written with.
void expect_same(const Weight& w, const testkit::TestTensor& t, const std::string& name) {
  ASSERT_TRUE(w.present()) << name;
  const size_t n = w.rows * w.cols;
  ASSERT_EQ(n, t.values.size()) << name;
  ASSERT_EQ(n * dtype_size(w.dtype), t.bytes.size()) << name;
  std::vector<float> back(n);
  to_f32(w.dtype, w.data, back.data(), n);
  EXPECT_EQ(back, t.values) << name;
  EXPECT_EQ(std::memcmp(w.data, t.bytes.data(), t.bytes.size()), 0) << name;
}

TEST(weights, round_trips_random_qwen2_qwen3_and_mistral_checkpoints_in_each_dtype) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}) {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (int shards : {1, 3}) {
        SCOPED_TRACE(std::string(arch) + " " + std::string(dtype_name(dt)) + " shards " +
                     std::to_string(shards));
        TempDir dir;
        const testkit::FakeModel m = testkit::random_model(arch, dt, 11);
        m.write(dir.path(), shards);
        const ModelConfig c = load_model_config(dir / "config.json");
        const ModelWeights w = load_weights(c, dir.path());
        expect_bound(c, w, dt);
        EXPECT_EQ(w.checkpoint.file_count(), size_t(shards));
        expect_same(w.embed, m.tensors.at("model.embed_tokens.weight"), "embed");
        expect_same(w.final_norm, m.tensors.at("model.norm.weight"), "norm");
        expect_same(w.lm_head, m.tensors.at("lm_head.weight"), "lm_head");
        for (size_t i = 0; i < w.layers.size(); ++i) {
          const std::string p = "model.layers." + std::to_string(i) + ".";
          const LayerWeights& l = w.layers[i];
          const std::pair<const Weight*, const char*> named[] = {
              {&l.attn_norm, "input_layernorm.weight"}, {&l.wq, "self_attn.q_proj.weight"},
              {&l.wk, "self_attn.k_proj.weight"},       {&l.wv, "self_attn.v_proj.weight"},
              {&l.wo, "self_attn.o_proj.weight"},       {&l.mlp_norm, "post_attention_layernorm.weight"},
              {&l.w_gate, "mlp.gate_proj.weight"},      {&l.w_up, "mlp.up_proj.weight"},
              {&l.w_down, "mlp.down_proj.weight"},      {&l.bq, "self_attn.q_proj.bias"},
              {&l.bk, "self_attn.k_proj.bias"},         {&l.bv, "self_attn.v_proj.bias"},
              {&l.q_norm, "self_attn.q_norm.weight"},   {&l.k_norm, "self_attn.k_norm.weight"}};
          for (const auto& [weight, suffix] : named) {
            auto t = m.tensors.find(p + suffix);
            if (t == m.tensors.end()) {
              EXPECT_FALSE(weight->present()) << p + suffix;
            } else {
              expect_same(*weight, t->second, p + suffix);
            }
          }
        }
      }
    }
  }
}

TEST(weights, uses_the_embedding_when_tied_and_lm_head_is_absent) {
  TempDir dir;
  json cfg = testkit::small_config("LlamaForCausalLM", DType::bf16);
  cfg["tie_word_embeddings"] = true;
  testkit::random_model_for(cfg, DType::bf16).write(dir.path());
  const ModelConfig c = load_model_config(dir / "config.json");
  const ModelWeights w = load_weights(c, dir.path());
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  expect_bound(c, w, DType::bf16);
}

TEST(weights, rejects_a_missing_lm_head_when_not_tied) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("LlamaForCausalLM", DType::bf16);
  m.tensors.erase("lm_head.weight");
  m.write(dir.path());
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {"'lm_head.weight'", "not found", dir.path().string(),
                            "tie_word_embeddings"}));
}

TEST(weights, rejects_a_config_with_fewer_layers_than_the_checkpoint_instead_of_running_part_of_it) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("LlamaForCausalLM", DType::bf16);
  const int layers = m.config["num_hidden_layers"];
  m.config["num_hidden_layers"] = layers - 1;
  m.write(dir.path());
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {"'model.layers." + std::to_string(layers - 1) + ".input_layernorm.weight'",
                            "is present", "num_hidden_layers is " + std::to_string(layers - 1),
                            "more layers than the config runs"}));
}

TEST(weights, rejects_a_config_with_more_layers_than_the_checkpoint_before_sizing_anything_by_it) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("LlamaForCausalLM", DType::bf16);
  const int layers = m.config["num_hidden_layers"];
  for (const int n : {layers + 1, 2147483647}) {
    m.config["num_hidden_layers"] = n;
    m.write(dir.path());
    const ModelConfig c = load_model_config(dir / "config.json");
    EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                             {"'model.layers." + std::to_string(n - 1) + ".input_layernorm.weight'",
                              "not found", "num_hidden_layers (" + std::to_string(n) + ")",
                              "more than the checkpoint's layers"}))
        << n;
  }
}

TEST(weights, rejects_a_weight_whose_dtype_differs_from_config_torch_dtype) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("Qwen2ForCausalLM", DType::bf16);
  std::mt19937 rng(5);
  m.tensors["model.layers.1.self_attn.k_proj.bias"] = testkit::random_tensor(DType::f16, {16}, rng);
  m.write(dir.path());
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {(dir / "model.safetensors").string(),
                            "'model.layers.1.self_attn.k_proj.bias'", "has dtype F16",
                            "torch_dtype bfloat16"}));
}

TEST(weights, rejects_mixed_dtypes_when_config_names_no_torch_dtype) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("MistralForCausalLM", DType::f16);
  m.config.erase("torch_dtype");
  std::mt19937 rng(5);
  m.tensors["model.norm.weight"] = testkit::random_tensor(DType::f32, {32}, rng);
  m.write(dir.path(), 2);
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {"model-00002-of-00002.safetensors", "'model.norm.weight'",
                            "has dtype F32", "expected F16"}));
}

TEST(weights, rejects_a_weight_of_the_wrong_shape_naming_tensor_file_and_shapes) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("Qwen3ForCausalLM", DType::bf16);
  std::mt19937 rng(5);
  // hidden / heads = 8, but the config's head_dim is 16.
  m.tensors["model.layers.0.self_attn.q_norm.weight"] = testkit::random_tensor(DType::bf16, {8}, rng);
  m.write(dir.path());
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {(dir / "model.safetensors").string(),
                            "'model.layers.0.self_attn.q_norm.weight'", "expected shape [16]",
                            "found [8]"}));
}

TEST(weights, rejects_a_missing_tensor_naming_it_and_the_directory) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("Qwen2ForCausalLM", DType::f32);
  m.tensors.erase("model.layers.1.mlp.up_proj.weight");
  m.write(dir.path(), 3);
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {"tensor 'model.layers.1.mlp.up_proj.weight' not found in",
                            dir.path().string()}));
}

TEST(weights, rejects_biases_the_config_does_not_declare) {
  TempDir dir;
  json cfg = testkit::small_config("LlamaForCausalLM", DType::bf16);
  cfg["attention_bias"] = true;
  testkit::random_model_for(cfg, DType::bf16).write(dir.path());
  // Written with biases; declared without them: the forward pass would ignore them.
  cfg["attention_bias"] = false;
  testkit::write_json(dir / "config.json", cfg);
  const ModelConfig c = load_model_config(dir / "config.json");
  EXPECT_TRUE(contains_all(error_of([&] { (void)load_weights(c, dir.path()); }),
                           {"'model.layers.0.self_attn.q_proj.bias'", "attention_bias"}));
  cfg["attention_bias"] = true;
  testkit::write_json(dir / "config.json", cfg);
  const ModelConfig with_bias = load_model_config(dir / "config.json");
  expect_bound(with_bias, load_weights(with_bias, dir.path()), DType::bf16);
}

}  // namespace
}  // namespace vc

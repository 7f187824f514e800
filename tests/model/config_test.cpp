// Tests of config.json parsing: the supported architectures, defaults, validation
// errors (naming file and field), and RoPE inverse frequencies with llama3 scaling.
#include "runtime/model/config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "tests/model/checkpoint_writer.hpp"

namespace vc {
namespace {

using nlohmann::json;
using testkit::contains_all;

/// The vc::Error message of parse_model_config(j, "cfg.json"), or "" when it parses.
std::string parse_error(const json& j) {
  try {
    (void)parse_model_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

json llama() { return testkit::small_config("LlamaForCausalLM", DType::bf16); }

TEST(config, loads_the_bundled_tinycode_config) {
  const ModelConfig c = load_model_config(std::string(VC_MODEL_DIR) + "/config.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.arch_name, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_TRUE(c.dtype_given);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::none);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.bos_token_id, 2046);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2047});
  EXPECT_EQ(c.q_dim(), 256);
  EXPECT_EQ(c.kv_dim(), 128);
}

TEST(config, load_errors_name_the_config_file) {
  testkit::TempDir dir;
  json j = llama();
  j.erase("intermediate_size");
  testkit::write_json(dir / "config.json", j);
  const std::string path = (dir / "config.json").string();
  EXPECT_TRUE(contains_all(testkit::error_of([&] { (void)load_model_config(path); }),
                           {path, "'intermediate_size'", "missing"}));
  std::ofstream(path) << "{\"vocab_size\": ";
  EXPECT_TRUE(contains_all(testkit::error_of([&] { (void)load_model_config(path); }),
                           {path, "not valid JSON"}));
  const std::string absent = (dir / "nope.json").string();
  EXPECT_TRUE(contains_all(testkit::error_of([&] { (void)load_model_config(absent); }),
                           {absent, "cannot open"}));
}

TEST(config, reads_llama3_rope_scaling_from_the_test_checkpoint) {
  const ModelConfig c =
      load_model_config(std::string(VC_TEST_DATA_DIR) + "/archs/llama3-rope-scaling/config.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_inv_freq().size(), 8u);
  EXPECT_FALSE(c.dtype_given);  // no torch_dtype in this config.json
  EXPECT_EQ(c.dtype, DType::bf16);
}

TEST(config, applies_the_documented_defaults) {
  json j = llama();
  for (const char* k : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "torch_dtype",
                        "bos_token_id", "eos_token_id"})
    j.erase(k);
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.num_kv_heads, c.num_heads);
  EXPECT_EQ(c.head_dim, 32 / 4);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_FALSE(c.dtype_given);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::none);
}

TEST(config, reads_eos_token_id_as_an_int_or_a_list) {
  json j = llama();
  j["eos_token_id"] = json::array({7, 9});
  EXPECT_EQ(parse_model_config(j, "cfg.json").eos_token_ids, (std::vector<int>{7, 9}));
  j["eos_token_id"] = "7";
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "eos_token_id", "integer"}));
}

TEST(config, reads_each_torch_dtype) {
  json j = llama();
  j["torch_dtype"] = "float16";
  EXPECT_EQ(parse_model_config(j, "cfg.json").dtype, DType::f16);
  j["torch_dtype"] = "float32";
  EXPECT_EQ(parse_model_config(j, "cfg.json").dtype, DType::f32);
  j["torch_dtype"] = "int8";
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "torch_dtype", "int8", "bfloat16"}));
}

TEST(config, gives_qwen2_attention_biases_always) {
  json j = testkit::small_config("Qwen2ForCausalLM", DType::bf16);
  j["attention_bias"] = false;  // ignored: Qwen2 always has q/k/v biases
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.arch, Arch::qwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
}

TEST(config, gives_qwen3_qk_norm_and_attention_bias_from_config) {
  json j = testkit::small_config("Qwen3ForCausalLM", DType::bf16);
  ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 64);  // != hidden_size
  j["attention_bias"] = true;
  EXPECT_TRUE(parse_model_config(j, "cfg.json").attention_bias);
}

TEST(config, reads_mistral_and_llama_attention_bias) {
  json j = testkit::small_config("MistralForCausalLM", DType::bf16);
  EXPECT_EQ(parse_model_config(j, "cfg.json").arch, Arch::mistral);
  EXPECT_FALSE(parse_model_config(j, "cfg.json").attention_bias);
  j = llama();
  j["attention_bias"] = true;
  EXPECT_TRUE(parse_model_config(j, "cfg.json").attention_bias);
}

TEST(config, a_mistral_sliding_window_shorter_than_the_positions_limits_the_context) {
  json j = testkit::small_config("MistralForCausalLM", DType::bf16);
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.context_length(), 4096u);
  EXPECT_STREQ(c.context_length_field(), "sliding_window");
  EXPECT_NO_THROW(c.require_context(4096, "--context: 4096"));
  try {
    c.require_context(4097, "--context: 4097");
    ADD_FAILURE() << "4097 positions past a window of 4096 should be refused";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--context: 4097 exceeds the model's context of 4096 tokens (sliding_window)");
  }
  j["sliding_window"] = nullptr;  // Mistral v0.2 and later: no window
  const ModelConfig none = parse_model_config(j, "cfg.json");
  EXPECT_EQ(none.sliding_window, 0);
  EXPECT_EQ(none.context_length(), 32768u);
  EXPECT_STREQ(none.context_length_field(), "max_position_embeddings");
  j["sliding_window"] = 65536;  // wider than the positions: the positions limit
  EXPECT_EQ(parse_model_config(j, "cfg.json").context_length(), 32768u);
  j["sliding_window"] = 0;
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "sliding_window", "positive"}));
}

TEST(config, a_qwen_sliding_window_counts_only_with_use_sliding_window) {
  json j = testkit::small_config("Qwen2ForCausalLM", DType::bf16);
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = false;  // Qwen2.5's configs: a window given, not used
  EXPECT_EQ(parse_model_config(j, "cfg.json").context_length(), 32768u);
  j["use_sliding_window"] = true;
  EXPECT_EQ(parse_model_config(j, "cfg.json").context_length(), 4096u);
  j = llama();  // Transformers' Llama has no sliding window: a stray field is ignored
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_model_config(j, "cfg.json").context_length(), 32768u);
}

TEST(config, rejects_an_unknown_architecture_naming_it) {
  json j = llama();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "architectures", "GPT2LMHeadModel", "LlamaForCausalLM"}));
  j.erase("architectures");
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "architectures", "missing"}));
}

TEST(config, rejects_a_missing_required_field_naming_file_and_field) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "rms_norm_eps", "max_position_embeddings"}) {
    json j = llama();
    j.erase(field);
    EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", field, "missing", "expected"}))
        << field;
  }
}

TEST(config, rejects_a_field_of_the_wrong_json_type) {
  json j = llama();
  j["hidden_size"] = "32";
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "'hidden_size'", "expected an integer", "string"}));
  j = llama();
  j["num_hidden_layers"] = 2.5;
  EXPECT_TRUE(contains_all(parse_error(j), {"'num_hidden_layers'", "integer"}));
  j = llama();
  j["tie_word_embeddings"] = 1;
  EXPECT_TRUE(contains_all(parse_error(j), {"'tie_word_embeddings'", "true or false"}));
  j = llama();
  j["rope_theta"] = "big";
  EXPECT_TRUE(contains_all(parse_error(j), {"'rope_theta'", "number"}));
  EXPECT_TRUE(contains_all(parse_error(json::array()), {"cfg.json"}));
}

TEST(config, rejects_non_positive_sizes) {
  for (const char* field : {"vocab_size", "hidden_size", "num_attention_heads", "head_dim"}) {
    json j = llama();
    j[field] = 0;
    EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", field, "positive", "found 0"}))
        << field;
  }
  json j = llama();
  j["num_key_value_heads"] = -2;
  EXPECT_TRUE(contains_all(parse_error(j), {"num_key_value_heads", "positive"}));
  j = llama();
  j["rms_norm_eps"] = 0.0;
  EXPECT_TRUE(contains_all(parse_error(j), {"rms_norm_eps", "positive"}));
}

TEST(config, rejects_an_eps_a_float_cannot_hold_and_a_rope_base_below_one) {
  // Each passed the double's check and then ran: 0 or inf in float, or inverse
  // frequencies past a float's range, and the tokens came out all 0.
  json j = llama();
  j["rms_norm_eps"] = 1e39;
  EXPECT_TRUE(contains_all(parse_error(j), {"rms_norm_eps", "float", "found 1e+39"}));
  j["rms_norm_eps"] = 1e-50;
  EXPECT_TRUE(contains_all(parse_error(j), {"rms_norm_eps", "float", "found 1e-50"}));
  j = llama();
  j["rope_theta"] = 1e-40;
  EXPECT_TRUE(contains_all(parse_error(j), {"rope_theta", "at least 1", "found 1e-40"}));
  j["rope_theta"] = 1.0;
  EXPECT_EQ(parse_error(j), "");
}

TEST(config, rejects_heads_not_divisible_by_kv_heads) {
  json j = llama();
  j["num_key_value_heads"] = 3;
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "num_key_value_heads", "divisor", "found 3"}));
}

TEST(config, rejects_heads_times_head_dim_past_32_bits_instead_of_wrapping) {
  // 6 x 1431655808 wraps to 256 in 32 bits: a real q_proj's width.
  json j = llama();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 3;
  j["head_dim"] = 1431655808;
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "head_dim", "num_attention_heads (6)",
                                            "8589934848", "does not fit in 32 bits"}));
  j = llama();
  j["num_attention_heads"] = 1073741824;
  j["num_key_value_heads"] = 1073741824;
  j["head_dim"] = 2;
  EXPECT_TRUE(contains_all(parse_error(j), {"head_dim", "num_attention_heads (1073741824)", "32 bits"}));
}

TEST(config, rejects_hidden_not_divisible_by_heads_without_head_dim) {
  json j = llama();
  j["hidden_size"] = 30;
  EXPECT_TRUE(contains_all(parse_error(j), {"hidden_size", "head_dim"}));
}

TEST(config, rejects_unsupported_rope_scaling_types_naming_them) {
  for (const char* type : {"linear", "yarn", "dynamic"}) {
    json j = llama();
    j["rope_scaling"] = {{"type", type}, {"factor", 2.0}};
    EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "rope_scaling", type, "unsupported"}))
        << type;
  }
}

TEST(config, treats_null_and_default_rope_scaling_as_none) {
  json j = llama();
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_model_config(j, "cfg.json").rope_scaling.type, RopeScaling::Type::none);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_model_config(j, "cfg.json").rope_scaling.type, RopeScaling::Type::none);
}

TEST(config, rejects_llama3_rope_scaling_missing_a_parameter) {
  json j = llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}};
  EXPECT_TRUE(contains_all(parse_error(j), {"cfg.json", "rope_scaling.original_max_position_embeddings", "missing"}));
}

TEST(config, computes_plain_rope_inverse_frequencies) {
  json j = llama();
  j["rope_theta"] = 10000.0;
  j["head_dim"] = 8;
  const std::vector<float> f = parse_model_config(j, "cfg.json").rope_inv_freq();
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], 0.1f);    // 10000^(-2/8)
  EXPECT_FLOAT_EQ(f[2], 0.01f);   // 10000^(-4/8)
  EXPECT_FLOAT_EQ(f[3], 0.001f);  // 10000^(-6/8)
}

TEST(config, scales_rope_inverse_frequencies_like_hugging_face_llama3) {
  json j = llama();
  j["rope_theta"] = 10000.0;
  j["head_dim"] = 8;
  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 128}};
  const std::vector<float> f = parse_model_config(j, "cfg.json").rope_inv_freq();
  ASSERT_EQ(f.size(), 4u);
  // low_freq_wavelen = 128 / 1 = 128, high_freq_wavelen = 128 / 4 = 32.
  // i=0: inv 1, wavelen 2pi = 6.28 < 32: kept.
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  // i=1: inv 0.1, wavelen 62.83 in [32, 128]: smooth = (128 / 62.83 - 1) / (4 - 1)
  //      = 0.345728, inv = (1 - smooth) * 0.1 / 8 + smooth * 0.1 = 0.0427512.
  const double smooth = (128.0 / (2.0 * 3.14159265358979323846 / 0.1) - 1.0) / 3.0;
  EXPECT_NEAR(smooth, 0.345728, 1e-6);
  EXPECT_FLOAT_EQ(f[1], float((1.0 - smooth) * 0.1 / 8.0 + smooth * 0.1));
  EXPECT_FLOAT_EQ(f[1], 0.042751178754f);
  // i=2: inv 0.01, wavelen 628 > 128: divided by the factor.
  EXPECT_FLOAT_EQ(f[2], 0.00125f);
  // i=3: inv 0.001, wavelen 6283 > 128: divided by the factor.
  EXPECT_FLOAT_EQ(f[3], 0.000125f);
}

}  // namespace
}  // namespace vc

// Random weights for a shape: one splitmix64 hash per element (no RNG state, so rows
// are generated in parallel and any order), scaled like a standard init.
#include "runtime/model/random_model.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "kernels/error.hpp"
#include "runtime/model/generated_checkpoint.hpp"
#include "runtime/model/tokenizer.hpp"

namespace vc {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

enum class Init { normal, ones, zeros };

TensorSpec make_tensor(std::string name, std::vector<int64_t> shape, Init init, uint64_t seed,
                       float std_dev) {
  TensorSpec t{std::move(name), std::move(shape), {}};
  const size_t cols = t.cols();
  if (init != Init::normal) {
    const float v = init == Init::ones ? 1.0f : 0.0f;
    t.fill = [cols, v](size_t, float* out) { std::fill_n(out, cols, v); };
    return t;
  }
  const uint64_t h = fnv1a(t.name);
  t.fill = [cols, seed, h, std_dev](size_t row, float* out) {
    for (size_t c = 0; c < cols; ++c) out[c] = std_dev * random_weight_value(seed, h, row * cols + c);
  };
  return t;
}

std::string model_card(const ModelShape& s, const RandomModelOptions& opt,
                       const WrittenCheckpoint& w) {
  const ModelConfig& c = s.parsed;
  return fmt::format(
      "{}\n# Random weights of shape `{}`\n\n"
      "Written by `vericache model random --shape {} --seed {}` ({} parameters, {:.2f} GB in {}, "
      "{} file{}).\n\n"
      "Architecture {}: hidden {}, {} layers, {} query / {} KV heads of head_dim {}, FFN {}, "
      "vocabulary {}, rope_theta {}.\n\n"
      "## What is real\n\n"
      "- The memory traffic and the FLOPs of every layer of this shape: the same matrices, "
      "the same KV bytes per token ({} bytes in bf16).\n\n"
      "## What is not\n\n"
      "- The weights: every matrix is N(0, {}) from a hash of (seed, tensor name, index); "
      "norms are 1, biases 0. The model writes noise and its attention has no structure: "
      "acceptance rates and compression quality measured on it mean nothing.\n"
      "- The vocabulary: {} ids, the bundled tokenizer's (the real model has 128K-152K), "
      "so the embedding and LM head are small and a decode step reads fewer weight bytes "
      "than the real model's.\n",
      kGeneratedCardMarker, s.name, s.name, opt.seed, w.parameters, double(w.total_bytes) / 1e9,
      dtype_name(opt.dtype), w.files.size(), w.files.size() == 1 ? "" : "s", c.arch_name,
      c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size,
      c.vocab_size, c.rope_theta, 2 * c.num_layers * c.num_kv_heads * c.head_dim * 2,
      opt.init_std, c.vocab_size);
}

}  // namespace

float random_weight_value(uint64_t seed, uint64_t name_hash, uint64_t index) {
  const uint64_t r = mix64(mix64(seed ^ name_hash) + index);
  const float sum = float(r & 0xffff) + float((r >> 16) & 0xffff) + float((r >> 32) & 0xffff) +
                    float(r >> 48);
  // Four uniforms on [0, 1): mean 2, variance 4/12.
  return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

GeneratedModel write_random_model(const ModelShape& shape, const std::filesystem::path& out,
                                  const RandomModelOptions& opt) {
  const ModelConfig& c = shape.parsed;
  nlohmann::json config = shape.config;
  config["torch_dtype"] = opt.dtype == DType::f32 ? "float32"
                          : opt.dtype == DType::f16 ? "float16" : "bfloat16";
  // Special token ids from the tokenizer's model, when they fit the vocabulary.
  if (!opt.tokenizer_dir.empty()) {
    std::error_code ec;
    // A vocabulary smaller than the tokenizer's ids would load and then refuse
    // every prompt that uses one of the ids past it.
    if (std::filesystem::exists(opt.tokenizer_dir / "tokenizer.json", ec)) {
      const int ids = Tokenizer::from_file(opt.tokenizer_dir / "tokenizer.json").vocab_size();
      if (c.vocab_size < ids)
        throw Error("shape '" + shape.name + "': vocab_size " + std::to_string(c.vocab_size) +
                    " is smaller than the tokenizer's " + std::to_string(ids) + " ids (" +
                    (opt.tokenizer_dir / "tokenizer.json").string() + ")");
    }
    if (std::filesystem::exists(opt.tokenizer_dir / "config.json", ec)) {
      const ModelConfig tc = load_model_config(opt.tokenizer_dir / "config.json");
      if (tc.bos_token_id >= 0 && tc.bos_token_id < c.vocab_size) config["bos_token_id"] = tc.bos_token_id;
      if (!tc.eos_token_ids.empty() && tc.eos_token_ids[0] < c.vocab_size)
        config["eos_token_id"] = tc.eos_token_ids[0];
    }
  }
  (void)parse_model_config(config, "config.json for shape '" + shape.name + "'");

  prepare_output_dir(out);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  const uint64_t seed = opt.seed;
  const float sd = opt.init_std;
  std::vector<TensorSpec> t;
  t.push_back(make_tensor("model.embed_tokens.weight", {V, H}, Init::normal, seed, sd));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back(make_tensor(p + "input_layernorm.weight", {H}, Init::ones, seed, sd));
    t.push_back(make_tensor(p + "self_attn.q_proj.weight", {qd, H}, Init::normal, seed, sd));
    t.push_back(make_tensor(p + "self_attn.k_proj.weight", {kvd, H}, Init::normal, seed, sd));
    t.push_back(make_tensor(p + "self_attn.v_proj.weight", {kvd, H}, Init::normal, seed, sd));
    if (c.attention_bias) {
      t.push_back(make_tensor(p + "self_attn.q_proj.bias", {qd}, Init::zeros, seed, sd));
      t.push_back(make_tensor(p + "self_attn.k_proj.bias", {kvd}, Init::zeros, seed, sd));
      t.push_back(make_tensor(p + "self_attn.v_proj.bias", {kvd}, Init::zeros, seed, sd));
    }
    if (c.qk_norm) {
      t.push_back(make_tensor(p + "self_attn.q_norm.weight", {c.head_dim}, Init::ones, seed, sd));
      t.push_back(make_tensor(p + "self_attn.k_norm.weight", {c.head_dim}, Init::ones, seed, sd));
    }
    t.push_back(make_tensor(p + "self_attn.o_proj.weight", {H, qd}, Init::normal, seed, sd));
    t.push_back(make_tensor(p + "post_attention_layernorm.weight", {H}, Init::ones, seed, sd));
    t.push_back(make_tensor(p + "mlp.gate_proj.weight", {I, H}, Init::normal, seed, sd));
    t.push_back(make_tensor(p + "mlp.up_proj.weight", {I, H}, Init::normal, seed, sd));
    t.push_back(make_tensor(p + "mlp.down_proj.weight", {H, I}, Init::normal, seed, sd));
  }
  t.push_back(make_tensor("model.norm.weight", {H}, Init::ones, seed, sd));
  if (!c.tie_word_embeddings)
    t.push_back(make_tensor("lm_head.weight", {V, H}, Init::normal, seed, sd));

  const int threads = opt.threads > 0 ? opt.threads
                                      : int(std::max(1u, std::thread::hardware_concurrency()));
  GeneratedModel g;
  g.config = config;
  write_config(out, config);
  if (!opt.tokenizer_dir.empty()) copy_tokenizer(opt.tokenizer_dir, out);
  g.checkpoint = write_checkpoint(out, t, opt.dtype, opt.max_shard_bytes, threads);
  write_text_file(out / "MODEL_CARD.md", model_card(shape, opt, g.checkpoint));
  return g;
}

}  // namespace vc

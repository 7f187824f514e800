// Test helper (header-only): writes safetensors files, shard indexes and config.json
// into a temporary directory: random weights for a given architecture, plus raw
// writers that let a test corrupt headers, offsets, dtypes and files.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc::testkit {

/// Success when `message` contains every one of `parts`; else names the missing ones.
/// Use as EXPECT_TRUE(contains_all(e.what(), {"file", "field"})).
inline ::testing::AssertionResult contains_all(const std::string& message,
                                               std::initializer_list<std::string> parts) {
  std::string missing;
  for (const std::string& p : parts)
    if (message.find(p) == std::string::npos) missing += " '" + p + "'";
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message \"" << message << "\" lacks" << missing;
}

/// The vc::Error message `f()` throws, or "" if it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const vc::Error& e) {
    return e.what();
  }
  return "";
}

/// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vc_ckpt_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  /// `path() / name`.
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

/// One tensor to write: its safetensors dtype string (may be any string, e.g. "I8",
/// to test rejection), shape, raw bytes, and (for float types) the values the bytes
/// decode to exactly.
struct TestTensor {
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

/// Encodes `values` as `t` (after which decoding gives the values back exactly when
/// they were produced by round_to()).
inline std::vector<uint8_t> encode(DType t, const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * dtype_size(t));
  if (!values.empty()) from_f32(t, values.data(), out.data(), values.size());
  return out;
}

/// Random values in [-1, 1) rounded to what `t` can represent.
inline std::vector<float> random_values(DType t, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  std::vector<uint8_t> bytes = encode(t, v);
  if (n) to_f32(t, bytes.data(), v.data(), n);
  return v;
}

/// A tensor of random values of dtype `t` and shape `shape`.
inline TestTensor random_tensor(DType t, std::vector<int64_t> shape, std::mt19937& rng) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  TestTensor tt;
  tt.dtype = std::string(dtype_name(t));
  tt.shape = std::move(shape);
  tt.values = random_values(t, n, rng);
  tt.bytes = encode(t, tt.values);
  return tt;
}

/// Writes the raw safetensors layout: 8-byte little-endian `header.size()`, the
/// header text, then `data`. Any header text at all, so tests can corrupt it.
inline void write_raw_safetensors(const std::filesystem::path& path, const std::string& header,
                                  const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

/// Writes a well-formed safetensors file: tensors laid out back to back in name
/// order, header padded with spaces to a multiple of 8 bytes.
inline void write_safetensors(const std::filesystem::path& path,
                              const std::map<std::string, TestTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  write_raw_safetensors(path, text, data);
}

/// Writes `j` as a JSON file.
inline void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2);
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

/// Reads a JSON file (for tests that edit a written index or config).
inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

/// Cuts `path` to `size` bytes.
inline void truncate_file(const std::filesystem::path& path, uintmax_t size) {
  std::filesystem::resize_file(path, size);
}

/// A small random model: config.json contents plus every tensor by HF name. Tests
/// may edit `config` and `tensors` (drop one, change a dtype or shape) before write().
struct FakeModel {
  nlohmann::json config;
  std::map<std::string, TestTensor> tensors;

  /// Writes config.json and model.safetensors (shards == 1), or `shards` files
  /// model-0000k-of-0000n.safetensors plus model.safetensors.index.json.
  void write(const std::filesystem::path& dir, int shards = 1) const {
    write_json(dir / "config.json", config);
    if (shards <= 1) {
      write_safetensors(dir / "model.safetensors", tensors);
      return;
    }
    std::vector<std::map<std::string, TestTensor>> parts(static_cast<size_t>(shards));
    nlohmann::json weight_map = nlohmann::json::object();
    size_t i = 0;
    for (const auto& [name, t] : tensors) {
      const size_t s = i++ * size_t(shards) / tensors.size();
      parts[s].emplace(name, t);
      weight_map[name] = shard_name(int(s), shards);
    }
    for (size_t s = 0; s < parts.size(); ++s)
      write_safetensors(dir / shard_name(int(s), shards), parts[s]);
    write_json(dir / "model.safetensors.index.json",
               {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
  }

  /// "model-00002-of-00003.safetensors" for s = 1, n = 3.
  [[nodiscard]] static std::string shard_name(int s, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, n);
    return buf;
  }
};

/// Config of a small model of `arch` ("LlamaForCausalLM", "MistralForCausalLM",
/// "Qwen2ForCausalLM", "Qwen3ForCausalLM") stored as `t`.
inline nlohmann::json small_config(const std::string& arch, DType t) {
  const char* torch_dtype = t == DType::f32 ? "float32" : (t == DType::f16 ? "float16" : "bfloat16");
  nlohmann::json c = {
      {"architectures", {arch}}, {"vocab_size", 96},  {"hidden_size", 32},
      {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 512},
      {"rope_theta", 10000.0}, {"bos_token_id", 1}, {"eos_token_id", 2},
      {"tie_word_embeddings", false}, {"torch_dtype", torch_dtype}};
  if (arch == "Qwen3ForCausalLM") c["head_dim"] = 16;  // != hidden / heads, as in Qwen3
  return c;
}

/// Random weights for `config` (as small_config() makes, possibly edited), with the
/// tensor set the architecture needs: q/k/v biases for Qwen2 or attention_bias,
/// q_norm/k_norm for Qwen3, no lm_head when tie_word_embeddings.
inline FakeModel random_model_for(const nlohmann::json& config, DType t, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  FakeModel m;
  m.config = config;
  const std::string arch = config["architectures"][0];
  const int64_t vocab = config["vocab_size"], hidden = config["hidden_size"];
  const int64_t inter = config["intermediate_size"], layers = config["num_hidden_layers"];
  const int64_t heads = config["num_attention_heads"];
  const int64_t kv_heads = config.value("num_key_value_heads", heads);
  const int64_t head_dim = config.value("head_dim", hidden / heads);
  const int64_t q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  const bool bias = arch == "Qwen2ForCausalLM" || config.value("attention_bias", false);
  const bool qk_norm = arch == "Qwen3ForCausalLM";
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    m.tensors[name] = random_tensor(t, std::move(shape), rng);
  };
  add("model.embed_tokens.weight", {vocab, hidden});
  add("model.norm.weight", {hidden});
  if (!config.value("tie_word_embeddings", false)) add("lm_head.weight", {vocab, hidden});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hidden});
    add(p + "post_attention_layernorm.weight", {hidden});
    add(p + "self_attn.q_proj.weight", {q_dim, hidden});
    add(p + "self_attn.k_proj.weight", {kv_dim, hidden});
    add(p + "self_attn.v_proj.weight", {kv_dim, hidden});
    add(p + "self_attn.o_proj.weight", {hidden, q_dim});
    if (bias) {
      add(p + "self_attn.q_proj.bias", {q_dim});
      add(p + "self_attn.k_proj.bias", {kv_dim});
      add(p + "self_attn.v_proj.bias", {kv_dim});
    }
    if (qk_norm) {
      add(p + "self_attn.q_norm.weight", {head_dim});
      add(p + "self_attn.k_norm.weight", {head_dim});
    }
    add(p + "mlp.gate_proj.weight", {inter, hidden});
    add(p + "mlp.up_proj.weight", {inter, hidden});
    add(p + "mlp.down_proj.weight", {hidden, inter});
  }
  return m;
}

/// random_model_for(small_config(arch, t), t, seed).
inline FakeModel random_model(const std::string& arch, DType t, uint32_t seed = 1) {
  return random_model_for(small_config(arch, t), t, seed);
}

}  // namespace vc::testkit

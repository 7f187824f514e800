// Parsing and validation of a Hugging Face config.json into a ModelConfig, and the
// RoPE inverse frequencies it implies (with Llama-3 frequency scaling).
#include "runtime/model/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <fstream>
#include <numbers>
#include <optional>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"

namespace vc {
namespace {

using nlohmann::json;

/// Reads typed fields of one JSON object; every error names the file and the field.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw Error(source_ + ": field '" + prefix_ + std::string(field) + "': " +
                std::string(what));
  }

  /// The value of `field`, or nullptr when absent or null.
  [[nodiscard]] const json* find(std::string_view field) const {
    auto it = obj_.find(std::string(field));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[nodiscard]] const json& require(std::string_view field, std::string_view expected) const {
    const json* v = find(field);
    if (!v) fail(field, "missing; expected " + std::string(expected));
    return *v;
  }

  [[nodiscard]] int64_t get_int(const json& v, std::string_view field) const {
    if (!v.is_number_integer())
      fail(field, "expected an integer, found " + describe(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX))
      fail(field, "expected an integer that fits in 32 bits, found " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x > INT32_MAX || x < INT32_MIN)
      fail(field, "expected an integer that fits in 32 bits, found " + v.dump());
    return x;
  }

  /// A required (or defaulted) integer > 0.
  [[nodiscard]] int positive_int(std::string_view field, std::optional<int> dflt = {}) const {
    const json* v = find(field);
    if (!v) {
      if (dflt) return *dflt;
      fail(field, "missing; expected a positive integer");
    }
    const int64_t x = get_int(*v, field);
    if (x <= 0) fail(field, "expected a positive integer, found " + v->dump());
    return int(x);
  }

  [[nodiscard]] double number(std::string_view field, std::optional<double> dflt = {}) const {
    const json* v = find(field);
    if (!v) {
      if (dflt) return *dflt;
      fail(field, "missing; expected a number");
    }
    if (!v->is_number()) fail(field, "expected a number, found " + describe(*v));
    return v->get<double>();
  }

  [[nodiscard]] double positive_number(std::string_view field,
                                       std::optional<double> dflt = {}) const {
    const double x = number(field, dflt);
    if (!(x > 0.0) || !std::isfinite(x))
      fail(field, "expected a positive finite number, found " + json(x).dump());
    return x;
  }

  [[nodiscard]] bool boolean(std::string_view field, bool dflt) const {
    const json* v = find(field);
    if (!v) return dflt;
    if (!v->is_boolean()) fail(field, "expected true or false, found " + describe(*v));
    return v->get<bool>();
  }

  [[nodiscard]] std::string string(std::string_view field, std::string_view expected) const {
    const json& v = require(field, expected);
    if (!v.is_string()) fail(field, "expected " + std::string(expected) + ", found " + describe(v));
    return v.get<std::string>();
  }

  /// A short description of a JSON value's type and value, for messages.
  [[nodiscard]] static std::string describe(const json& v) {
    std::string text = v.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + text;
  }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

constexpr std::string_view kSupported =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM";

Arch parse_arch(const FieldReader& r, std::string& name) {
  const json& archs = r.require("architectures", std::string("a list naming one of ") +
                                                     std::string(kSupported));
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    r.fail("architectures",
           "expected a non-empty list of strings, found " + FieldReader::describe(archs));
  name = archs[0].get<std::string>();
  if (name == "LlamaForCausalLM") return Arch::llama;
  if (name == "MistralForCausalLM") return Arch::mistral;
  if (name == "Qwen2ForCausalLM") return Arch::qwen2;
  if (name == "Qwen3ForCausalLM") return Arch::qwen3;
  r.fail("architectures", "unknown architecture '" + name + "'; expected " +
                              std::string(kSupported));
}

RopeScaling parse_rope_scaling(const FieldReader& r, const std::string& source) {
  RopeScaling rs;
  const json* v = r.find("rope_scaling");
  if (!v) return rs;
  if (!v->is_object())
    r.fail("rope_scaling", "expected null or an object, found " + FieldReader::describe(*v));
  const FieldReader sub(*v, source, "rope_scaling.");
  std::string type;
  if (sub.find("rope_type"))
    type = sub.string("rope_type", "a string such as \"llama3\"");
  else if (sub.find("type"))
    type = sub.string("type", "a string such as \"llama3\"");
  else
    r.fail("rope_scaling", "missing \"rope_type\" (or \"type\"); expected \"llama3\" or \"default\"");
  if (type == "default") return rs;
  if (type != "llama3")
    r.fail("rope_scaling", "unsupported rope scaling type '" + type +
                               "'; supported: \"llama3\" (and \"default\" for none)");
  rs.type = RopeScaling::Type::llama3;
  rs.factor = sub.positive_number("factor");
  rs.low_freq_factor = sub.positive_number("low_freq_factor");
  rs.high_freq_factor = sub.positive_number("high_freq_factor");
  rs.original_max_position_embeddings = sub.positive_int("original_max_position_embeddings");
  if (!(rs.high_freq_factor > rs.low_freq_factor))
    sub.fail("high_freq_factor", "expected a value greater than low_freq_factor (" +
                                     json(rs.low_freq_factor).dump() + "), found " +
                                     json(rs.high_freq_factor).dump());
  return rs;
}

std::vector<int> parse_eos(const FieldReader& r) {
  std::vector<int> ids;
  const json* v = r.find("eos_token_id");
  if (!v) return ids;
  if (v->is_array()) {
    for (const json& e : *v) {
      const int64_t id = r.get_int(e, "eos_token_id");
      if (id < 0) r.fail("eos_token_id", "expected non-negative token ids, found " + v->dump());
      ids.push_back(int(id));
    }
    return ids;
  }
  if (!v->is_number_integer())
    r.fail("eos_token_id", "expected an integer or a list of integers, found " +
                               FieldReader::describe(*v));
  const int64_t id = r.get_int(*v, "eos_token_id");
  if (id < 0) r.fail("eos_token_id", "expected a non-negative token id, found " + v->dump());
  ids.push_back(int(id));
  return ids;
}

void parse_dtype(const FieldReader& r, ModelConfig& c) {
  // Newer transformers write "dtype"; older ones "torch_dtype".
  const char* field = r.find("torch_dtype") ? "torch_dtype" : (r.find("dtype") ? "dtype" : nullptr);
  if (!field) return;
  const std::string s = r.string(field, "\"bfloat16\", \"float16\" or \"float32\"");
  if (s == "bfloat16") c.dtype = DType::bf16;
  else if (s == "float16") c.dtype = DType::f16;
  else if (s == "float32") c.dtype = DType::f32;
  else r.fail(field, "unsupported dtype '" + s + "'; expected \"bfloat16\", \"float16\" or \"float32\"");
  c.dtype_given = true;
}

// The forward pass implements SwiGLU: the MLP activation must be SiLU.
void parse_hidden_act(const FieldReader& r) {
  const json* v = r.find("hidden_act");
  if (!v) return;  // Hugging Face's default for these architectures is "silu"
  if (!v->is_string())
    r.fail("hidden_act", "expected \"silu\", found " + FieldReader::describe(*v));
  const std::string act = v->get<std::string>();
  if (act != "silu" && act != "swish")
    r.fail("hidden_act", "unsupported activation '" + act +
                             "'; this runtime implements \"silu\" (also called \"swish\") only");
}

}  // namespace

size_t ModelConfig::context_length() const {
  if (sliding_window > 0 && sliding_window < max_position_embeddings) return size_t(sliding_window);
  return size_t(max_position_embeddings);
}

const char* ModelConfig::context_length_field() const {
  return context_length() < size_t(max_position_embeddings) ? "sliding_window"
                                                             : "max_position_embeddings";
}

void ModelConfig::require_context(size_t positions, const std::string& what) const {
  if (positions > context_length())
    throw Error(what + " exceeds the model's context of " + std::to_string(context_length()) +
                " tokens (" + context_length_field() + ")");
}

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(source + ": expected a JSON object, found " + FieldReader::describe(j));
  const FieldReader r(j, source);
  ModelConfig c;
  c.arch = parse_arch(r, c.arch_name);

  c.vocab_size = r.positive_int("vocab_size");
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    r.fail("num_key_value_heads", "expected a divisor of num_attention_heads (" +
                                      std::to_string(c.num_heads) + "), found " +
                                      std::to_string(c.num_kv_heads));
  if (r.find("head_dim")) {
    c.head_dim = r.positive_int("head_dim");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      r.fail("hidden_size", "no head_dim given, so expected a multiple of num_attention_heads (" +
                                std::to_string(c.num_heads) + "), found " +
                                std::to_string(c.hidden_size));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0)
    r.fail("head_dim", "expected an even head dimension (RoPE rotates pairs), found " +
                           std::to_string(c.head_dim));
  // The projections' widths are 32-bit sizes throughout: their products must fit.
  for (const auto& [heads, field] : {std::pair{c.num_heads, "num_attention_heads"},
                                     std::pair{c.num_kv_heads, "num_key_value_heads"}}) {
    if (int64_t(heads) * c.head_dim > INT32_MAX)
      r.fail("head_dim", std::string(field) + " (" + std::to_string(heads) + ") x head_dim (" +
                             std::to_string(c.head_dim) + ") = " +
                             std::to_string(int64_t(heads) * c.head_dim) +
                             " does not fit in 32 bits");
  }

  c.rope_theta = r.positive_number("rope_theta", 10000.0);
  // Below 1 the inverse frequencies grow past 1 and, for small bases, past a float.
  if (c.rope_theta < 1.0)
    r.fail("rope_theta", "expected a RoPE base of at least 1, found " + json(c.rope_theta).dump());
  const double eps = r.positive_number("rms_norm_eps");
  // The norms compute in float: it must be one (converting a larger double is undefined).
  c.rms_norm_eps = eps <= double(std::numeric_limits<float>::max()) ? float(eps) : 0.0f;
  if (!(c.rms_norm_eps > 0.0f))
    r.fail("rms_norm_eps", "expected a positive number that a float holds (about 1.4e-45 to 3.4e38), found " +
                               json(eps).dump());
  c.rope_scaling = parse_rope_scaling(r, source);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.max_position_embeddings = r.positive_int("max_position_embeddings");
  // Mistral applies "sliding_window" whenever it is set; Qwen2/3 carry one that only
  // applies with "use_sliding_window": true; Llama has none (Transformers ignores it).
  const bool window_applies = c.arch == Arch::mistral ? true
                              : c.arch == Arch::llama ? false
                                                      : r.boolean("use_sliding_window", false);
  if (window_applies && r.find("sliding_window") != nullptr)
    c.sliding_window = r.positive_int("sliding_window");

  if (const json* bos = r.find("bos_token_id")) {
    const int64_t id = r.get_int(*bos, "bos_token_id");
    if (id < 0) r.fail("bos_token_id", "expected a non-negative token id, found " + bos->dump());
    c.bos_token_id = int(id);
  }
  c.eos_token_ids = parse_eos(r);
  // Ids the model can never produce would make end-of-text undetectable.
  if (c.bos_token_id >= c.vocab_size)
    r.fail("bos_token_id", "expected a token id below vocab_size (" +
                               std::to_string(c.vocab_size) + "), found " +
                               std::to_string(c.bos_token_id));
  for (int id : c.eos_token_ids)
    if (id >= c.vocab_size)
      r.fail("eos_token_id", "expected token ids below vocab_size (" +
                                 std::to_string(c.vocab_size) + "), found " + std::to_string(id));
  parse_dtype(r, c);
  parse_hidden_act(r);

  switch (c.arch) {
    case Arch::qwen2:
      c.attention_bias = true;  // Qwen2 always has q/k/v biases
      break;
    case Arch::qwen3:
      c.qk_norm = true;
      c.attention_bias = r.boolean("attention_bias", false);
      break;
    case Arch::llama:
    case Arch::mistral:
      c.attention_bias = r.boolean("attention_bias", false);
      break;
  }
  if (r.boolean("mlp_bias", false))
    r.fail("mlp_bias", "MLP biases are not supported; expected false or absent");
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  const std::string text = read_file_bounded(path, kMaxTextFileBytes, path.string());
  return parse_model_config(parse_json_bounded(text, path.string()), path.string());
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int half = head_dim / 2;
  std::vector<float> out(size_t(std::max(half, 0)));
  const RopeScaling& rs = rope_scaling;
  const double old_len = rs.original_max_position_embeddings;
  const double low_freq_wavelen = old_len / rs.low_freq_factor;
  const double high_freq_wavelen = old_len / rs.high_freq_factor;
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(rope_theta, double(2 * i) / double(head_dim));
    if (rs.type == RopeScaling::Type::llama3) {
      // Hugging Face _compute_llama3_parameters.
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen < high_freq_wavelen) {
        // high frequency: kept
      } else if (wavelen > low_freq_wavelen) {
        inv = inv / rs.factor;
      } else {
        const double smooth = (old_len / wavelen - rs.low_freq_factor) /
                              (rs.high_freq_factor - rs.low_freq_factor);
        inv = (1.0 - smooth) * inv / rs.factor + smooth * inv;
      }
    }
    out[size_t(i)] = float(inv);
  }
  return out;
}

}  // namespace vc

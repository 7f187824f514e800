// Model hyper-parameters read from a Hugging Face config.json, validated once.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/dtype.hpp"

namespace vc {

/// Supported `architectures[0]` values.
enum class Arch { llama, mistral, qwen2, qwen3 };

/// `rope_scaling` of config.json. Only type "llama3" changes the frequencies.
struct RopeScaling {
  enum class Type { none, llama3 };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

/// Validated model configuration. Derived values are computed once by the parser.
struct ModelConfig {
  Arch arch = Arch::llama;
  std::string arch_name;          // e.g. "LlamaForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;               // config "head_dim", else hidden_size / num_heads
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;    // q/k/v projection biases (Qwen2 always; Llama "attention_bias")
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE (Qwen3)
  int max_position_embeddings = 0;
  /// Sliding-window attention the checkpoint asks for ("sliding_window": Mistral; Qwen2/3
  /// only with "use_sliding_window": true; never Llama), 0 when none. Not applied: a context of at
  /// most this many tokens attends to every position either way, so context_length()
  /// stops there and longer requests are refused instead of decoded differently.
  int sliding_window = 0;
  int bos_token_id = -1;          // -1 when absent
  std::vector<int> eos_token_ids; // config "eos_token_id": an int or a list
  DType dtype = DType::bf16;      // "torch_dtype": every weight must be stored in it
  bool dtype_given = false;       // config.json names torch_dtype (or "dtype"); when it
                                  // does not, the weights' own (uniform) dtype is used

  /// Tokens a sequence may hold: max_position_embeddings, or the sliding window when
  /// that is smaller (see sliding_window).
  [[nodiscard]] size_t context_length() const;
  /// "max_position_embeddings" or "sliding_window": which field context_length() is.
  [[nodiscard]] const char* context_length_field() const;
  /// Throws vc::Error "WHAT exceeds the model's context of N tokens (FIELD)" when
  /// `positions` > context_length(); `what` names the options that asked for them.
  void require_context(size_t positions, const std::string& what) const;
  [[nodiscard]] int q_dim() const { return num_heads * head_dim; }
  [[nodiscard]] int kv_dim() const { return num_kv_heads * head_dim; }
  /// RoPE inverse frequencies (head_dim / 2 values), with llama3 scaling applied.
  [[nodiscard]] std::vector<float> rope_inv_freq() const;
};

/// Parse and validate; errors name `source` (the file) and the field.
[[nodiscard]] ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
/// Read `path` (a config.json) and parse it.
[[nodiscard]] ModelConfig load_model_config(const std::filesystem::path& path);

}  // namespace vc

// The tensors of a Llama-family decoder, bound by name and checked against config.
#pragma once
#include <cstddef>
#include <filesystem>
#include <vector>

#include "kernels/dtype.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/safetensors.hpp"
#include "runtime/model/weight.hpp"

namespace vc {

struct LayerWeights {
  Weight attn_norm;              // [hidden]
  Weight wq, wk, wv, wo;         // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Weight bq, bk, bv;             // biases, present when config.attention_bias
  Weight q_norm, k_norm;         // [head_dim], present when config.qk_norm
  Weight mlp_norm;               // [hidden]
  Weight w_gate, w_up, w_down;   // [inter, hidden] x2, [hidden, inter]
};

/// All weights of a model; keeps its checkpoint mapped.
struct ModelWeights {
  Checkpoint checkpoint;
  DType dtype = DType::bf16;     // dtype of every weight: config.dtype, or the
                                 // checkpoint's own when config.json names none
  Weight embed;                  // [vocab, hidden]
  Weight final_norm;             // [hidden]
  Weight lm_head;                // [vocab, hidden]; the embedding when tied
  std::vector<LayerWeights> layers;
};

/// Binds Hugging Face names (model.layers.N.self_attn.q_proj.weight, ...) and checks
/// every dtype against config.dtype (or, when config.json names no torch_dtype,
/// against the embedding's dtype) and every shape against the config.
[[nodiscard]] ModelWeights load_weights(const ModelConfig& cfg, const std::filesystem::path& dir);

}  // namespace vc

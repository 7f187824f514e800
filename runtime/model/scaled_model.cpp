// Padding a trained model to a larger shape with zeros so that it computes the same
// function. Every target tensor is the source tensor seen through a row map and a
// column map (target index -> source index, or none: zero), times a factor.
//
// Why the output stays the same:
// - Residual stream: the embedding's extra columns and the extra output rows of
//   o_proj and down_proj are zero, so dims >= H of the residual are exactly 0.
// - RMSNorm: y_i = w_i x_i / sqrt(S/H + eps) with S = sum of x_i^2 over the H source
//   dims. Over H' dims whose extras are zero the sum is still S, so with
//   eps' = eps * H/H' the denominator is sqrt(S/H' + eps') = sqrt(H/H') sqrt(S/H + eps),
//   and w'_i = w_i * sqrt(H/H') gives y'_i = y_i (extra dims: w' = 0). One eps serves
//   every norm because they all run over the hidden size (no q/k norm).
// - Attention: scores are q.k / sqrt(d); padding d to d' = m*d with zero dims leaves
//   q.k unchanged but divides by sqrt(d'), so q's weights (and bias) are scaled by
//   sqrt(m). Heads and RoPE dims are placed as ScaledHeadLayout says.
// - Extra query heads are zero: they attend uniformly, but o_proj's columns for them
//   are zero. Extra FFN units: gate and up rows zero, silu(0) * 0 = 0.
// - Extra layers are copies of source layers (so their attention and KV look like a
//   real model's, and cost the same) whose o_proj and down_proj are zero: x + 0 = x.
// What changes is rounding: the scaled norm and q weights are rounded to the output
// dtype again, and sums over longer rows group their terms differently.
#include "runtime/model/scaled_model.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "kernels/error.hpp"
#include "runtime/model/generated_checkpoint.hpp"
#include "runtime/model/weights.hpp"

namespace vc {
namespace {

using IndexMap = std::shared_ptr<const std::vector<int64_t>>;  // target -> source, -1: zero

IndexMap identity_prefix(size_t target, size_t source) {
  auto m = std::make_shared<std::vector<int64_t>>(target, -1);
  for (size_t i = 0; i < source; ++i) (*m)[i] = int64_t(i);
  return m;
}

// Target tensor = source through the maps, times `factor`; no source: zeros.
TensorSpec mapped(std::string name, std::vector<int64_t> shape, const Weight* src,
                  IndexMap rows, IndexMap cols, float factor) {
  TensorSpec t{std::move(name), std::move(shape), {}};
  const size_t n = t.cols();
  if (src == nullptr || !src->present()) {
    t.fill = [n](size_t, float* out) { std::fill_n(out, n, 0.0f); };
    return t;
  }
  const Weight w = *src;
  t.fill = [w, rows, cols, factor, n](size_t row, float* out) {
    const int64_t sr = (*rows)[row];
    if (sr < 0) {
      std::fill_n(out, n, 0.0f);
      return;
    }
    thread_local std::vector<float> source_row;
    source_row.resize(w.cols);
    to_f32(w.dtype, static_cast<const std::byte*>(w.data) + size_t(sr) * w.cols * dtype_size(w.dtype),
           source_row.data(), w.cols);
    for (size_t c = 0; c < n; ++c) {
      const int64_t sc = (*cols)[c];
      out[c] = sc < 0 ? 0.0f : source_row[size_t(sc)] * factor;
    }
  };
  return t;
}

void require_at_least(const std::string& shape, const char* field, int target, int source) {
  if (target < source)
    throw Error(fmt::format("--shape '{}': {} {} is smaller than the source model's {} (scale "
                            "only pads a model to a larger shape)", shape, field, target, source));
}

std::string model_card(const std::filesystem::path& source_dir, const ModelConfig& s,
                       const ModelShape& shape, const ModelConfig& t, const ScaleOptions& opt,
                       const WrittenCheckpoint& w) {
  return fmt::format(
      "{}\n# `{}` padded with zeros to the shape `{}`\n\n"
      "Written by `vericache model scale --shape {} --model {}` ({} parameters, {:.2f} GB in {}, "
      "{} file{}).\n\n"
      "| | source | this model |\n|---|---|---|\n"
      "| hidden | {} | {} |\n| layers | {} | {} |\n| query / KV heads | {} / {} | {} / {} |\n"
      "| head_dim | {} | {} |\n| FFN | {} | {} |\n| vocabulary | {} | {} |\n\n"
      "## What is real\n\n"
      "- The memory traffic and FLOPs of the shape: every matrix has the shape's size and is "
      "read and multiplied in full (zeros cost what any value costs); the KV cache holds "
      "{} bytes per token in bf16, as the shape does.\n"
      "- The outputs of the source model: the extra dimensions, heads, FFN units and layers "
      "are zero or add zero to the residual, norms are rescaled (weights x sqrt(H/H'), "
      "rms_norm_eps x H/H') and queries scaled by sqrt(head_dim'/head_dim), so greedy tokens "
      "equal the source's (logits up to rounding) and the acceptance behaviour of "
      "draft-and-verify decoding is that of the source model, a small trained code model.\n\n"
      "## What is not\n\n"
      "- Quality: this is the source model's quality, not the shape's.\n"
      "- The vocabulary ({} ids, the source's; the real model has 128K-152K): the embedding "
      "and LM head are small, so a decode step reads fewer weight bytes than the real model.\n"
      "- RoPE and context: the source's (rope_theta {}, max_position_embeddings {}), not the "
      "shape's.\n"
      "- Extra layers copy source layers' attention and MLP inputs (their KV and attention "
      "look real) but add nothing; extra heads attend with zero queries.\n",
      kGeneratedCardMarker, source_dir.filename().string(), shape.name, shape.name,
      source_dir.string(), w.parameters, double(w.total_bytes) / 1e9, dtype_name(opt.dtype),
      w.files.size(), w.files.size() == 1 ? "" : "s", s.hidden_size, t.hidden_size, s.num_layers,
      t.num_layers, s.num_heads, s.num_kv_heads, t.num_heads, t.num_kv_heads, s.head_dim,
      t.head_dim, s.intermediate_size, t.intermediate_size, s.vocab_size, t.vocab_size,
      2 * t.num_layers * t.num_kv_heads * t.head_dim * 2, t.vocab_size, t.rope_theta,
      t.max_position_embeddings);
}

}  // namespace

ScaledHeadLayout scaled_head_layout(const ModelConfig& s, const ModelConfig& t,
                                    const std::string& shape_name) {
  require_at_least(shape_name, "head_dim", t.head_dim, s.head_dim);
  if (t.head_dim % s.head_dim != 0)
    throw Error(fmt::format("--shape '{}': head_dim {} is not a multiple of the source model's {} "
                            "(RoPE frequencies match only for a whole multiple)",
                            shape_name, t.head_dim, s.head_dim));
  const size_t g = size_t(s.num_heads / s.num_kv_heads), g2 = size_t(t.num_heads / t.num_kv_heads);
  ScaledHeadLayout L;
  L.kv_copies = (g + g2 - 1) / g2;
  if (size_t(t.num_kv_heads) < size_t(s.num_kv_heads) * L.kv_copies)
    throw Error(fmt::format(
        "--shape '{}': num_key_value_heads {} (with {} query heads each) cannot hold the source "
        "model's {} query heads over {} KV heads: needs at least {} KV heads",
        shape_name, t.num_kv_heads, g2, s.num_heads, s.num_kv_heads,
        size_t(s.num_kv_heads) * L.kv_copies));
  for (size_t h = 0; h < size_t(s.num_heads); ++h) {
    const size_t k = h / g, r = h % g;
    L.query_head.push_back((k * L.kv_copies + r / g2) * g2 + r % g2);
  }
  const size_t d = size_t(s.head_dim), d2 = size_t(t.head_dim), m = d2 / d;
  for (size_t i = 0; i < d; ++i)
    L.head_dim_index.push_back(i < d / 2 ? m * i : m * (i - d / 2) + d2 / 2);
  return L;
}

GeneratedModel write_scaled_model(const std::filesystem::path& source_dir,
                                  const ModelShape& shape, const std::filesystem::path& out,
                                  const ScaleOptions& opt) {
  const ModelConfig s = load_model_config(source_dir / "config.json");
  if (s.qk_norm)
    throw Error("--model '" + source_dir.string() + "': scale does not support models with q/k "
                "norm (Qwen3): their norms run over head_dim, not the hidden size");
  const ModelConfig& shp = shape.parsed;
  if (shp.qk_norm)  // the checkpoint would lack the norms its config.json asks for
    throw Error("--shape '" + shape.name + "': scale does not pad into shapes with q/k norm (Qwen3): "
                "the source has none, and a norm over head_dim cannot be made to change nothing");
  require_at_least(shape.name, "hidden_size", shp.hidden_size, s.hidden_size);
  require_at_least(shape.name, "intermediate_size", shp.intermediate_size, s.intermediate_size);
  require_at_least(shape.name, "num_hidden_layers", shp.num_layers, s.num_layers);
  const ScaledHeadLayout layout = scaled_head_layout(s, shp, shape.name);

  // config.json: the shape's sizes; the source's vocabulary, RoPE, context, tokens.
  nlohmann::json config = shape.config;
  const double H = s.hidden_size, H2 = shp.hidden_size;
  config["vocab_size"] = s.vocab_size;
  config["tie_word_embeddings"] = s.tie_word_embeddings;
  config["rope_theta"] = s.rope_theta;
  config.erase("rope_scaling");
  if (s.rope_scaling.type == RopeScaling::Type::llama3)
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", s.rope_scaling.factor},
                              {"low_freq_factor", s.rope_scaling.low_freq_factor},
                              {"high_freq_factor", s.rope_scaling.high_freq_factor},
                              {"original_max_position_embeddings",
                               s.rope_scaling.original_max_position_embeddings}};
  config["rms_norm_eps"] = double(s.rms_norm_eps) * H / H2;
  config["max_position_embeddings"] = s.max_position_embeddings;
  config.erase("bos_token_id");
  if (s.bos_token_id >= 0) config["bos_token_id"] = s.bos_token_id;
  config.erase("eos_token_id");
  if (!s.eos_token_ids.empty()) config["eos_token_id"] = s.eos_token_ids;
  config["attention_bias"] = s.attention_bias || shp.attention_bias;
  config["torch_dtype"] = opt.dtype == DType::f32 ? "float32"
                          : opt.dtype == DType::f16 ? "float16" : "bfloat16";
  const ModelConfig t = parse_model_config(config, "config.json for shape '" + shape.name + "'");

  const ModelWeights w = load_weights(s, source_dir);
  prepare_output_dir(out);

  // Index maps, target -> source.
  const size_t d = size_t(s.head_dim), d2 = size_t(t.head_dim);
  const IndexMap hidden = identity_prefix(size_t(t.hidden_size), size_t(s.hidden_size));
  const IndexMap ffn = identity_prefix(size_t(t.intermediate_size), size_t(s.intermediate_size));
  const IndexMap vocab = identity_prefix(size_t(t.vocab_size), size_t(s.vocab_size));
  const IndexMap one = identity_prefix(1, 1);
  auto q_rows = std::make_shared<std::vector<int64_t>>(size_t(t.q_dim()), -1);
  for (size_t h = 0; h < size_t(s.num_heads); ++h)
    for (size_t i = 0; i < d; ++i)
      (*q_rows)[layout.query_head[h] * d2 + layout.head_dim_index[i]] = int64_t(h * d + i);
  auto kv_rows = std::make_shared<std::vector<int64_t>>(size_t(t.kv_dim()), -1);
  for (size_t k = 0; k < size_t(s.num_kv_heads); ++k)
    for (size_t j = 0; j < layout.kv_copies; ++j)
      for (size_t i = 0; i < d; ++i)
        (*kv_rows)[(k * layout.kv_copies + j) * d2 + layout.head_dim_index[i]] = int64_t(k * d + i);

  const float norm_factor = float(std::sqrt(H / H2));
  const float q_factor = float(std::sqrt(double(d2) / double(d)));
  const int64_t Ht = t.hidden_size, It = t.intermediate_size, Vt = t.vocab_size;
  const int64_t qd = t.q_dim(), kvd = t.kv_dim();
  std::vector<TensorSpec> out_t;
  out_t.push_back(mapped("model.embed_tokens.weight", {Vt, Ht}, &w.embed, vocab, hidden, 1.0f));
  for (int l = 0; l < t.num_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l % s.num_layers)];
    const bool extra = l >= s.num_layers;  // adds nothing to the residual
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out_t.push_back(mapped(p + "input_layernorm.weight", {Ht}, &L.attn_norm, one, hidden, norm_factor));
    out_t.push_back(mapped(p + "self_attn.q_proj.weight", {qd, Ht}, &L.wq, q_rows, hidden, q_factor));
    out_t.push_back(mapped(p + "self_attn.k_proj.weight", {kvd, Ht}, &L.wk, kv_rows, hidden, 1.0f));
    out_t.push_back(mapped(p + "self_attn.v_proj.weight", {kvd, Ht}, &L.wv, kv_rows, hidden, 1.0f));
    if (t.attention_bias) {  // a source bias is a [1, n] row
      out_t.push_back(mapped(p + "self_attn.q_proj.bias", {qd}, &L.bq, one, q_rows, q_factor));
      out_t.push_back(mapped(p + "self_attn.k_proj.bias", {kvd}, &L.bk, one, kv_rows, 1.0f));
      out_t.push_back(mapped(p + "self_attn.v_proj.bias", {kvd}, &L.bv, one, kv_rows, 1.0f));
    }
    out_t.push_back(mapped(p + "self_attn.o_proj.weight", {Ht, qd}, extra ? nullptr : &L.wo, hidden,
                           q_rows, 1.0f));
    out_t.push_back(mapped(p + "post_attention_layernorm.weight", {Ht}, &L.mlp_norm, one, hidden,
                           norm_factor));
    out_t.push_back(mapped(p + "mlp.gate_proj.weight", {It, Ht}, &L.w_gate, ffn, hidden, 1.0f));
    out_t.push_back(mapped(p + "mlp.up_proj.weight", {It, Ht}, &L.w_up, ffn, hidden, 1.0f));
    out_t.push_back(mapped(p + "mlp.down_proj.weight", {Ht, It}, extra ? nullptr : &L.w_down,
                           hidden, ffn, 1.0f));
  }
  out_t.push_back(mapped("model.norm.weight", {Ht}, &w.final_norm, one, hidden, norm_factor));
  if (!t.tie_word_embeddings)
    out_t.push_back(mapped("lm_head.weight", {Vt, Ht}, &w.lm_head, vocab, hidden, 1.0f));

  const int threads = opt.threads > 0 ? opt.threads
                                      : int(std::max(1u, std::thread::hardware_concurrency()));
  GeneratedModel g;
  g.config = config;
  write_config(out, config);
  copy_tokenizer(source_dir, out);
  g.checkpoint = write_checkpoint(out, out_t, opt.dtype, opt.max_shard_bytes, threads);
  write_text_file(out / "MODEL_CARD.md", model_card(source_dir, s, shape, t, opt, g.checkpoint));
  return g;
}

}  // namespace vc

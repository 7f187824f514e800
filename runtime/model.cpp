// Model loading and derived sizes.
#include "runtime/model.hpp"

#include <string>

#include "kernels/error.hpp"
#include "runtime/linear_backend.hpp"

namespace vc {

Model::Model(std::filesystem::path dir, ModelConfig cfg, ModelWeights w)
    : dir_(std::move(dir)), config_(std::move(cfg)), weights_(std::move(w)),
      inv_freq_(config_.rope_inv_freq()) {}

std::shared_ptr<const Model> Model::load(const std::filesystem::path& dir) {
  ModelConfig cfg = load_model_config(dir / "config.json");
  ModelWeights w = load_weights(cfg, dir);
  return std::shared_ptr<const Model>(new Model(dir, std::move(cfg), std::move(w)));
}

std::shared_ptr<const Model> Model::on_device(std::shared_ptr<const Model> base, const Device& device) {
  if (!base) throw Error("Model::on_device: no model");
  if (device == base->device()) return base;
  if (!base->device().is_cpu()) return on_device(base->base_, device);  // from the CPU model
  if (device.is_cpu()) return base;
  if (base->tp() != nullptr)
    throw Error("device " + device.str() + ": tensor-parallel shards run on the CPU only (for now)");
  std::shared_ptr<Model> m(new Model(base->dir(), base->config(), base->weights()));
  std::vector<Weight> mats, biases;
  for (const LayerWeights& l : m->weights_.layers) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) mats.push_back(*w);
    for (const Weight* b : {&l.bq, &l.bk, &l.bv}) biases.push_back(*b);
  }
  mats.push_back(m->weights_.lm_head);
  m->linear_ = make_cuda_linear(mats, biases, device.index);
  m->device_ = device;
  m->base_ = std::move(base);
  return m;
}

static size_t count(const Weight& w) { return w.present() ? w.rows * w.cols : 0; }

size_t Model::parameter_count() const {
  size_t n = count(weights_.embed) + count(weights_.final_norm);
  if (weights_.lm_head.data != weights_.embed.data) n += count(weights_.lm_head);
  for (const auto& l : weights_.layers)
    for (const Weight* w : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                            &l.q_norm, &l.k_norm, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += count(*w);
  return n;
}

size_t Model::weight_bytes_per_step() const {
  const size_t elem = dtype_size(weights_.dtype);
  size_t n = count(weights_.lm_head) + count(weights_.final_norm);
  for (const auto& l : weights_.layers)
    for (const Weight* w : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                            &l.q_norm, &l.k_norm, &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += count(*w);
  return n * elem;
}

KvCacheConfig Model::kv_config(size_t max_tokens, DType kv_dtype, size_t block_tokens) const {
  if (block_tokens < 1 || block_tokens > kMaxBlockTokens)
    throw Error("block_tokens: expected 1-" + std::to_string(kMaxBlockTokens) + " positions, got " +
                std::to_string(block_tokens));
  KvCacheConfig c;
  c.num_layers = size_t(config_.num_layers);
  c.kv_heads = size_t(config_.num_kv_heads);
  c.head_dim = size_t(config_.head_dim);
  c.block_tokens = block_tokens;
  c.num_blocks = (max_tokens + block_tokens - 1) / block_tokens;
  c.dtype = kv_dtype;
  return c;
}

}  // namespace vc

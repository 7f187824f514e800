// Model loading and derived sizes.
#include "runtime/model.hpp"

#include <filesystem>
#include <string>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/linear_backend.hpp"

namespace vc {

Model::Model(std::filesystem::path dir, ModelConfig cfg, ModelWeights w)
    : dir_(std::move(dir)), config_(std::move(cfg)), weights_(std::move(w)),
      inv_freq_(config_.rope_inv_freq()) {}

std::shared_ptr<const Model> Model::load(const std::filesystem::path& dir) {
  if (dir.empty()) throw Error("model directory: an empty path");
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st))
    throw Error("model directory '" + dir.string() + "': " +
                (ec && st.type() != std::filesystem::file_type::not_found ? ec.message() : "does not exist"));
  if (!std::filesystem::is_directory(st))
    throw Error("model directory '" + dir.string() + "': is a file, not a directory");
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
  // Everything a layer reads, so that whole passes stay on the device
  // (LinearBackend::rows()): the matrices, biases, norm weights and the embedding.
  std::vector<Weight> mats, biases, vectors;
  for (const LayerWeights& l : base->weights().layers) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) mats.push_back(*w);
    for (const Weight* b : {&l.bq, &l.bk, &l.bv}) biases.push_back(*b);
    for (const Weight* v : {&l.attn_norm, &l.mlp_norm, &l.q_norm, &l.k_norm}) vectors.push_back(*v);
  }
  mats.push_back(base->weights().lm_head);
  mats.push_back(base->weights().embed);
  vectors.push_back(base->weights().final_norm);
  auto linear = make_cuda_linear(mats, biases, vectors, device.index);
  auto attention = make_cuda_attention(device.index);
  std::shared_ptr<Model> m = placed(std::move(base), std::move(linear), std::move(attention));
  m->device_ = device;
  return m;
}

std::shared_ptr<Model> Model::placed(std::shared_ptr<const Model> base,
                                     std::shared_ptr<LinearBackend> linear,
                                     std::shared_ptr<AttentionBackend> attention) {
  std::shared_ptr<Model> m(new Model(base->dir(), base->config(), base->weights()));
  m->linear_ = std::move(linear);
  m->attention_ = std::move(attention);
  m->base_ = std::move(base);
  return m;
}

std::string Model::numerics() const {
  std::string s = "cpu " + std::string(cpu::simd_path_name(cpu::active_simd_path()));
  if (linear_) s += "; products " + linear_->numerics();
  if (attention_) s += "; attention " + attention_->numerics();
  return s;
}

size_t Model::device_bytes() const {
  return (linear_ ? linear_->device_bytes() : 0) + (attention_ ? attention_->device_bytes() : 0);
}

std::shared_ptr<const Model> Model::with_backends(std::shared_ptr<const Model> base,
                                                  std::shared_ptr<LinearBackend> linear,
                                                  std::shared_ptr<AttentionBackend> attention) {
  if (!base) throw Error("Model::with_backends: no model");
  if (!base->device().is_cpu() || base->linear_ || base->attention_)
    throw Error("Model::with_backends: the model already runs on other backends");
  if (base->tp() != nullptr)
    throw Error("Model::with_backends: tensor-parallel shards run on the CPU only (for now)");
  return placed(std::move(base), std::move(linear), std::move(attention));
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

// A loaded model: validated config, memory-mapped weights, derived RoPE table.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/device.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace vc {

class Communicator;
class HeadShards;
class AttentionBackend;
class LinearBackend;
class Model;

/// A sharded model's place in its tensor-parallel group (Model::shard). Its config
/// counts this rank's heads, KV heads and MLP columns; embedding and LM head hold
/// the vocabulary rows [vocab_begin, vocab_end) (vocab_size stays the model's).
struct TensorParallelRank {
  std::shared_ptr<Communicator> comm;
  int rank = 0, degree = 1;
  size_t vocab_begin = 0, vocab_end = 0;
  size_t vocab_slice = 0;  // ceil(vocab / degree): every rank's gathered slice size
  size_t first_head = 0, first_kv_head = 0;     // in the unsharded model
  size_t global_heads = 0, global_kv_heads = 0;
  size_t global_intermediate = 0;
  /// What compressors see of the other ranks' KV heads (ModelFacts::shards).
  std::shared_ptr<HeadShards> head_shards;
  /// The model this shard was cut from (kept alive by the shard).
  const Model* unsharded = nullptr;
};

/// The first KV head rank `rank` of `degree` holds: KV heads split evenly, or, with
/// fewer KV heads than ranks, the one head its query heads read (replicated on
/// degree / kv_heads ranks).
[[nodiscard]] size_t shard_first_kv_head(size_t rank, size_t degree, size_t kv_heads);

/// Immutable after load: safe to share between threads and actors.
class Model {
 public:
  /// Reads `dir`/config.json and the safetensors checkpoint in `dir`.
  [[nodiscard]] static std::shared_ptr<const Model> load(const std::filesystem::path& dir);

  [[nodiscard]] const ModelConfig& config() const { return config_; }
  [[nodiscard]] const ModelWeights& weights() const { return weights_; }
  [[nodiscard]] const std::vector<float>& rope_inv_freq() const { return inv_freq_; }
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  /// Parameter count (for reports).
  [[nodiscard]] size_t parameter_count() const;
  /// Weight bytes read by one decode step (every matrix once, the embedding row aside).
  [[nodiscard]] size_t weight_bytes_per_step() const;
  /// A cache layout for this model holding `max_tokens` positions in total.
  [[nodiscard]] KvCacheConfig kv_config(size_t max_tokens, DType kv_dtype,
                                        size_t block_tokens = kDefaultBlockTokens) const;

  /// Rank `rank` of `comm`'s group, sharded as the reference engines shard a
  /// Llama model (runtime/tp_shard.cpp): q/k/v and gate/up column-parallel (by heads
  /// and by MLP columns), o and down row-parallel, embedding and LM head by
  /// vocabulary rows; KV heads split, or replicated when fewer than ranks. The
  /// forward pass then reduces through `comm`. Throws vc::Error when the model's
  /// heads, KV heads or MLP width do not split `comm->degree()` ways.
  [[nodiscard]] static std::shared_ptr<const Model> shard(std::shared_ptr<const Model> base,
                                                          int rank,
                                                          std::shared_ptr<Communicator> comm);
  /// The same shard (its rank, config and weights, the copied o_proj and down_proj
  /// columns included, all shared, not copied) reducing through `comm` instead: a
  /// second group of ranks over the same weights whose collectives never meet the
  /// first's (the engine's drafter and verifier groups). `comm` must be of the
  /// shard's degree; throws vc::Error naming what does not fit.
  [[nodiscard]] static std::shared_ptr<const Model> with_comm(std::shared_ptr<const Model> shard,
                                                              std::shared_ptr<Communicator> comm);
  /// `base` with its weight products and full-KV attention on `device`
  /// (runtime/linear_backend.hpp, runtime/attention_backend.hpp): for cuda:N its
  /// matrices, norm weights and embedding are copied to that GPU, and forward() runs
  /// each pass there with its rows kept on the device (LinearBackend::rows()),
  /// attending there over the KV blocks each pass reads; the KV tiers and sampling
  /// stay on the host. cpu gives the model on the
  /// CPU (`base` itself, or the one it was placed from).
  /// Throws vc::Error naming the device when it cannot be used (no CUDA in this
  /// build, no such device, weights that do not fit) or for a tensor-parallel shard
  /// (not placed on GPUs yet).
  [[nodiscard]] static std::shared_ptr<const Model> on_device(std::shared_ptr<const Model> base,
                                                              const Device& device);
  /// `base` (on the CPU, unsharded) with its weight products and full-KV attention
  /// handed to the given backends; either may be null (that part stays on the CPU).
  /// What on_device does with a GPU's backends; an embedder may bring its own, and
  /// the tests bring a host one to check forward()'s hand-off where no GPU is. The
  /// result's device is the CPU's name (it is not a placement on_device knows).
  [[nodiscard]] static std::shared_ptr<const Model> with_backends(
      std::shared_ptr<const Model> base, std::shared_ptr<LinearBackend> linear,
      std::shared_ptr<AttentionBackend> attention);
  [[nodiscard]] const Device& device() const { return device_; }
  /// What decides the bits of the KV and logits it computes, in words: the CPU's SIMD
  /// path (active_simd_path(), now) and its backends' numerics(). Keys of KV computed
  /// with it carry it (remote prefix chunks), so KV computed another way is not taken
  /// for it.
  [[nodiscard]] std::string numerics() const;
  /// Null on the CPU.
  [[nodiscard]] LinearBackend* linear_backend() const { return linear_.get(); }
  /// Null on the CPU.
  [[nodiscard]] AttentionBackend* attention_backend() const { return attention_.get(); }
  /// Device memory its backends hold now (0 on the CPU): the matrices, the KV
  /// caches' and views' copies, the buffers.
  [[nodiscard]] size_t device_bytes() const;

  /// Null for an unsharded model.
  [[nodiscard]] const TensorParallelRank* tp() const { return tp_ ? &*tp_ : nullptr; }
  /// The whole model's config: a shard's unsharded model's, else config().
  [[nodiscard]] const ModelConfig& whole_config() const { return tp_ ? tp_->unsharded->config() : config_; }

 private:
  Model(std::filesystem::path dir, ModelConfig cfg, ModelWeights w);
  /// A copy of `base`'s config and weights (shared) using these backends.
  static std::shared_ptr<Model> placed(std::shared_ptr<const Model> base,
                                       std::shared_ptr<LinearBackend> linear,
                                       std::shared_ptr<AttentionBackend> attention);
  std::filesystem::path dir_;
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;
  // Sharded models: the model whose weights the slices point into (the unsharded
  // model's mapping, or for with_comm the shard that owns the copied columns), and
  // the copied column slices.
  std::shared_ptr<const Model> base_;
  std::vector<std::vector<std::byte>> owned_;
  std::optional<TensorParallelRank> tp_;
  Device device_;
  std::shared_ptr<LinearBackend> linear_;
  std::shared_ptr<AttentionBackend> attention_;
};

}  // namespace vc

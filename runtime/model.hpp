// A loaded model: validated config, memory-mapped weights, derived RoPE table.
#pragma once
#include <filesystem>
#include <memory>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace vc {

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
                                        size_t block_tokens = 16) const;

 private:
  Model(std::filesystem::path dir, ModelConfig cfg, ModelWeights w);
  std::filesystem::path dir_;
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;
};

}  // namespace vc

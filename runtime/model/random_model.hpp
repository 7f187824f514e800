// `vericache model random`: a checkpoint of a given shape with random weights drawn
// from a seed — for measuring memory traffic and compute at a real model's shape
// without downloading one. The weights mean nothing; the text they write is noise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "kernels/dtype.hpp"
#include "runtime/model/model_shape.hpp"
#include "runtime/model/safetensors_writer.hpp"

namespace vc {

struct RandomModelOptions {
  uint64_t seed = 0;
  DType dtype = DType::bf16;
  float init_std = 0.02f;                      // matrices ~ N(0, init_std); norms 1; biases 0
  size_t max_shard_bytes = size_t(5000) << 20;  // about Hugging Face's 5 GB shards
  int threads = 0;                              // 0: the hardware's
  std::filesystem::path tokenizer_dir;          // tokenizer.json (+ config) copied from here
};

/// What a generator wrote.
struct GeneratedModel {
  WrittenCheckpoint checkpoint;
  nlohmann::json config;  // the config.json written
};

/// Value `index` of the tensor named `name`: approximately N(0, 1), from a counter-
/// based hash of (seed, name, index) — the same for any thread count or shard layout.
/// (Irwin-Hall sum of four 16-bit uniforms: bell-shaped, |z| < 3.47.)
[[nodiscard]] float random_weight_value(uint64_t seed, uint64_t name_hash, uint64_t index);

/// Writes config.json, the weights, the tokenizer and MODEL_CARD.md into `out`.
/// Throws vc::Error (naming the option or file) before writing anything when the
/// output directory cannot be used.
GeneratedModel write_random_model(const ModelShape& shape, const std::filesystem::path& out,
                                  const RandomModelOptions& opt);

}  // namespace vc

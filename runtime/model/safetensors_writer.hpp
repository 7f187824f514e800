// Writing safetensors checkpoints whose tensors are generated row by row: one
// `model.safetensors`, or shards `model-0000k-of-0000n.safetensors` plus
// `model.safetensors.index.json` when the total passes the shard size (the layout
// Hugging Face `save_pretrained` writes). Nothing is held whole in memory, so a
// 70B-shaped checkpoint streams to disk in blocks of rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace vc {

/// One tensor to write: [rows, cols] (a vector is one row). `fill(row, out)` writes
/// row `row`'s `cols` values as fp32 into `out`; it is called from several threads
/// at once (for different rows) and must depend only on `row`.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // 1 or 2 dimensions
  std::function<void(size_t row, float* out)> fill;

  [[nodiscard]] size_t rows() const { return shape.size() == 2 ? size_t(shape[0]) : 1; }
  [[nodiscard]] size_t cols() const { return size_t(shape.back()); }
};

/// What write_checkpoint wrote.
struct WrittenCheckpoint {
  std::vector<std::filesystem::path> files;  // the .safetensors files
  size_t total_bytes = 0;                    // tensor data bytes over all files
  size_t parameters = 0;
};

/// Writes `tensors` (in this order) into `dir`, every one converted to `dtype`,
/// splitting into shards of at most `max_shard_bytes` of tensor data (a tensor is
/// never split; one larger than the limit gets a shard of its own). `threads`
/// (>= 1) generate rows in parallel. Throws vc::Error naming the file on an I/O error.
[[nodiscard]] WrittenCheckpoint write_checkpoint(const std::filesystem::path& dir,
                                                 const std::vector<TensorSpec>& tensors,
                                                 DType dtype, size_t max_shard_bytes,
                                                 int threads);

}  // namespace vc

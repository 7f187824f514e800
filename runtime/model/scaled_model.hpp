// `vericache model scale`: a trained model padded with zeros to a larger shape. The
// padded model computes what the source computes (the same tokens; logits equal up
// to rounding) at the memory traffic and FLOPs of the larger shape, so speed can be
// measured at a real model's size with the acceptance behaviour of a real model.
//
// Requirements on the target shape (else vc::Error naming the field): hidden size,
// FFN size and layers >= the source's; head_dim a multiple of the source's; enough
// KV heads and query heads per KV head to place the source's heads (see
// scaled_head_layout); a source without q/k norm.
#pragma once
#include <cstddef>
#include <filesystem>
#include <vector>

#include "kernels/dtype.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model_shape.hpp"
#include "runtime/model/random_model.hpp"

namespace vc {

struct ScaleOptions {
  DType dtype = DType::bf16;
  size_t max_shard_bytes = size_t(5000) << 20;
  int threads = 0;  // 0: the hardware's
};

/// Where the source's heads go in the padded model.
///
/// GQA: source query head h reads KV head h / g (g = heads per KV head). With g' per
/// KV head in the target, each source KV head k is copied to c = ceil(g / g') target
/// KV heads k*c .. k*c+c-1, and source query head h (index r = h % g in its group)
/// goes to target KV head k*c + r / g', slot r % g': every source query head still
/// reads a copy of its own KV head. The other heads are zero.
///
/// head_dim: rotate-half RoPE rotates pairs (i, i + d/2) by pos * theta^(-2i/d). With
/// d' = m*d, target pair m*i has frequency theta^(-2mi/md) = the source pair i's (the
/// same double, bit for bit), so source dims i and i + d/2 go to m*i and m*i + d'/2;
/// the other dims are zero and rotate as zero.
struct ScaledHeadLayout {
  size_t kv_copies = 1;                  // c
  std::vector<size_t> query_head;        // [source heads] -> target query head
  std::vector<size_t> head_dim_index;    // [source head_dim] -> target dim
};

/// The layout, or vc::Error naming the shape field that cannot hold the source.
[[nodiscard]] ScaledHeadLayout scaled_head_layout(const ModelConfig& source,
                                                  const ModelConfig& target,
                                                  const std::string& shape_name);

/// Writes the padded model of `source_dir` at `shape` into `out`: config.json (the
/// shape's sizes with the source's vocabulary, RoPE, special tokens and context,
/// adjusted rms_norm_eps), weights, the source's tokenizer and MODEL_CARD.md.
/// Checks everything before writing.
GeneratedModel write_scaled_model(const std::filesystem::path& source_dir,
                                  const ModelShape& shape, const std::filesystem::path& out,
                                  const ScaleOptions& opt);

}  // namespace vc

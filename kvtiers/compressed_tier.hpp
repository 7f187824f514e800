// The compressed tier: one request's compressed view of its KV, in fast memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtiers/compressor.hpp"

namespace vc {

/// Kept rows of every (layer, KV head), as the compressor's plan and codec left them.
/// Values are held dequantized in fp32 for the CPU draft attention; stored_bytes()
/// counts what the tier stores at the plan's precision (codes + scales), which is
/// what a GPU deployment keeps in HBM and what every budget is charged.
class CompressedView {
 public:
  /// Applies `plan` to `kv` (quantizing kept rows through `codec.quantize`).
  [[nodiscard]] static CompressedView build(const KvSnapshot& kv, const CompressionPlan& plan,
                                            const Compressor& codec, const ModelFacts& model);

  [[nodiscard]] size_t layers() const { return layers_; }
  [[nodiscard]] size_t kv_heads() const { return kv_heads_; }
  [[nodiscard]] size_t head_dim() const { return head_dim_; }
  /// Positions [0, covered()) are represented by this view; later positions live in
  /// the request's paged tail.
  [[nodiscard]] size_t covered() const { return covered_; }

  [[nodiscard]] size_t count(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].positions.size(); }
  [[nodiscard]] const int32_t* positions(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].positions.data(); }
  /// [count, head_dim] fp32.
  [[nodiscard]] const float* k(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].k.data(); }
  [[nodiscard]] const float* v(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].v.data(); }

  /// Bytes stored at the plan's precision.
  [[nodiscard]] size_t stored_bytes() const { return stored_bytes_; }
  /// Bytes of the same positions in the full tier (bf16).
  [[nodiscard]] size_t full_bytes() const { return covered_ * layers_ * kv_heads_ * head_dim_ * 2 * 2; }
  [[nodiscard]] const QuantSpec& quant() const { return quant_; }

 private:
  struct Head {
    std::vector<int32_t> positions;
    std::vector<float> k, v;
  };
  size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, covered_ = 0, stored_bytes_ = 0;
  QuantSpec quant_;
  std::vector<Head> heads_;  // [layers * kv_heads]
};

}  // namespace vc

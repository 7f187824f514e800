// RotateKV-style quantization (Su et al., "RotateKV: Accurate and Robust 2-Bit KV
// Cache Quantization for LLMs via Outlier-Aware Adaptive Rotations", arXiv
// 2501.16383). Each key and value row is rotated by a normalised Walsh-Hadamard
// transform, which spreads a few outlier channels evenly over all channels, then
// quantized per token (asymmetric min/max over groups of `group_size` channels),
// dequantized, and rotated back (the normalised transform is its own inverse).
// Simplification: one fixed Hadamard rotation per row stands in for the paper's
// outlier-aware channel reordering, pre-RoPE grouped-head rotation and
// attention-sink handling. head_dim must be a power of two. Every position is kept;
// bits follow the ratio (2x -> 8, 4x -> 4, 8x -> 2) unless key_bits / value_bits
// are set.
#include <algorithm>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/hadamard.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

class RotateKv final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "rotate_kv"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Hadamard-rotates each key/value row, then quantizes per token (RotateKV, Su et al., "
           "arXiv 2501.16383)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"key_bits", double(bits_.key()), QuantBits::help(true)},
            {"value_bits", double(bits_.value()), QuantBits::help(false)},
            {"group_size", double(group_size_), "channels per quantization group of a rotated row"}};
  }

  void set_param(const std::string& name, double value) override {
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("rotate_kv", name, value);
    } else if (name == "group_size") {
      group_size_ = size_t(int_param("rotate_kv", name, value, 1, 1 << 16));
    } else {
      throw Error("rotate_kv: unknown parameter '" + name + "' (known: key_bits, value_bits, group_size)");
    }
  }

  [[nodiscard]] CompressionPlan plan(const CompressorInput& in) const override {
    check_head_dim(in.kv.head_dim);
    return keep_all_positions(in.kv, bits_.follow(in.ratio));
  }

  size_t quantize(size_t /*l*/, size_t /*g*/, const int32_t* /*positions*/, size_t n,
                  size_t head_dim, const ModelFacts& /*model*/, float* k,
                  float* v) const override {
    check_head_dim(head_dim);
    return side(k, n, head_dim, bits_.key()) + side(v, n, head_dim, bits_.value());
  }

 private:
  static void check_head_dim(size_t d) {
    if (d == 0 || (d & (d - 1)) != 0) {
      throw Error("rotate_kv: head_dim must be a power of two for the Hadamard rotation, got " +
                  std::to_string(d));
    }
  }

  /// Rotates, quantizes and rotates back the n rows of x; returns the stored bytes.
  size_t side(float* x, size_t n, size_t d, int bits) const {
    if (bits >= 16) {
      round_to_bf16(x, n * d);
      return n * d * 2;
    }
    const size_t gs = group_size_;
    for (size_t r = 0; r < n; ++r) {
      float* row = x + r * d;
      hadamard_inplace(row, d);
      for (size_t c0 = 0; c0 < d; c0 += gs) (void)quantize_group(row + c0, std::min(gs, d - c0), 1, bits);
      hadamard_inplace(row, d);
    }
    return packed_bytes(n * d, bits) + n * ((d + gs - 1) / gs) * 2 * 2;
  }

  QuantBits bits_;
  size_t group_size_ = 32;
};

}  // namespace

std::unique_ptr<Compressor> make_rotate_kv() { return std::make_unique<RotateKv>(); }

}  // namespace vc

// RotateKV-style quantization (Su et al., "RotateKV: Accurate and Robust 2-Bit KV
// Cache Quantization for LLMs via Outlier-Aware Adaptive Rotations", arXiv
// 2501.16383). Each key and value row is rotated by a normalised Walsh-Hadamard
// transform, which spreads a few outlier channels evenly over all channels, then
// quantized per token (asymmetric min/max over groups of `group_size` channels),
// dequantized, and rotated back (the normalised transform is its own inverse).
// Simplification: one fixed Hadamard rotation per row stands in for the paper's
// outlier-aware channel reordering, pre-RoPE grouped-head rotation and
// attention-sink handling. head_dim must be a power of two. Every position is kept.
//
// The ratio mapping (plan): the stored bytes of all kept rows (packed codes plus an
// fp16 scale and zero per group) must fit full bf16 bytes / ratio (up to
// kRatioSlack). Tried in order, the first fit wins: bits 8, 4, 3, 2; for each,
// group_size 32, 64, 128, ... (doubling until one group covers a head). A group
// of more than head_dim channels spans group_size / head_dim whole rotated rows
// (rotation spreads every row alike, so neighbouring rows share a range well). When
// nothing fits, the cheapest setting is used (the achieved ratio is then below the
// ask). key_bits / value_bits / group_size set with set_param are kept.
#include <algorithm>
#include <limits>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/hadamard.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

struct RotateSettings {
  int key_bits = 4, value_bits = 4;
  size_t group = 32;
};

/// Groups: `group` channels of a row; past head_dim, group / head_dim whole rows.
BlockShape group_shape(size_t group, size_t n, size_t d) {
  if (group <= d) return {1, group};
  return {std::clamp<size_t>(group / std::max<size_t>(d, 1), 1, std::max<size_t>(n, 1)), d};
}

size_t head_bytes(const RotateSettings& s, size_t n, size_t d) {
  const BlockShape shape = group_shape(s.group, n, d);
  return blocks_bytes(n, d, shape, s.key_bits) + blocks_bytes(n, d, shape, s.value_bits);
}

class RotateKv final : public Quantizer {
 public:
  [[nodiscard]] std::string_view name() const override { return "rotate_kv"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Hadamard-rotates each key/value row, then quantizes per token (RotateKV, Su et al., "
           "arXiv 2501.16383)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    const RotateSettings s = now_.get();
    return {{"key_bits", double(s.key_bits), QuantBits::help(true)},
            {"value_bits", double(s.value_bits), QuantBits::help(false)},
            {"group_size", double(s.group),
             "channels per quantization group of a rotated row (past head_dim: whole rows); "
             "unless set, 32 doubled as the ratio needs"}};
  }

  void set_param(const std::string& name, double value) override {
    RotateSettings s = now_.get();
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("rotate_kv", name, value);
      if (bits_.key_override() != 0) s.key_bits = bits_.key_override();
      if (bits_.value_override() != 0) s.value_bits = bits_.value_override();
    } else if (name == "group_size") {
      s.group = group_ = size_t(int_param("rotate_kv", name, value, 1, 1 << 30));
      group_set_ = true;
    } else {
      throw Error("rotate_kv: unknown parameter '" + name + "' (known: key_bits, value_bits, group_size)");
    }
    now_.set(s);
  }

  QuantSpec plan_rows(const QuantTarget& t) const override {
    const size_t d = t.head_dim, nmax = t.max_rows();
    check_head_dim(d);
    std::vector<size_t> groups = {group_};
    if (!group_set_) {
      for (size_t g = group_; g < nmax * d;) groups.push_back(g *= 2);
    }
    RotateSettings best;
    size_t best_bytes = std::numeric_limits<size_t>::max();
    for (const QuantSpec& bits : bits_.candidates()) {
      for (size_t g : groups) {
        const RotateSettings s{bits.key_bits, bits.value_bits, g};
        size_t bytes = 0;
        for (size_t n : t.rows) bytes += head_bytes(s, n, d);
        if (t.fits(bytes)) return record(s);
        if (bytes < best_bytes) best = s, best_bytes = bytes;
      }
    }
    return record(best);  // nothing fits: the cheapest
  }

  [[nodiscard]] size_t head_stored_bytes(size_t n, size_t head_dim) const override {
    return head_bytes(now_.get(), n, head_dim);
  }

  size_t quantize(size_t /*l*/, size_t /*g*/, const int32_t* /*positions*/, size_t n,
                  size_t head_dim, const ModelFacts& /*model*/, float* k, float* v,
                  PackedHead* packed = nullptr) const override {
    check_head_dim(head_dim);
    const RotateSettings s = now_.get();
    side(k, n, head_dim, s.key_bits, group_shape(s.group, n, head_dim), packed ? &packed->k : nullptr);
    side(v, n, head_dim, s.value_bits, group_shape(s.group, n, head_dim), packed ? &packed->v : nullptr);
    if (packed) packed->described = true;
    return head_bytes(s, n, head_dim);
  }

 private:
  static void check_head_dim(size_t d) {
    if (d == 0 || (d & (d - 1)) != 0) {
      throw Error("rotate_kv: head_dim must be a power of two for the Hadamard rotation, got " +
                  std::to_string(d));
    }
  }

  /// Rotates, quantizes and rotates back the n rows of x (recording the rotated
  /// codes and the inverse rotation in `packed` when given).
  static void side(float* x, size_t n, size_t d, int bits, BlockShape shape, PackedSide* packed) {
    if (bits >= 16) {
      round_to_bf16(x, n * d, packed);
      return;
    }
    for (size_t r = 0; r < n; ++r) hadamard_inplace(x + r * d, d);
    quantize_blocks(x, n, d, shape, bits, nullptr, packed);
    for (size_t r = 0; r < n; ++r) hadamard_inplace(x + r * d, d);
    if (packed) packed->transform = PackedTransform::hadamard;
  }

  QuantSpec record(const RotateSettings& s) const {
    now_.set(s);
    return QuantSpec{s.key_bits, s.value_bits};
  }

  QuantBits bits_;
  size_t group_ = 32;
  bool group_set_ = false;
  Recorded<RotateSettings> now_;  // in force: set_param, then the last plan
};

}  // namespace

std::unique_ptr<Compressor> make_rotate_kv() { return std::make_unique<RotateKv>(); }

}  // namespace vc

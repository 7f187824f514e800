// KVQuant-style quantization (Hooper et al., "KVQuant: Towards 10 Million Context
// Length LLM Inference with KV Cache Quantization", arXiv 2401.18079). Keys are
// quantized per channel BEFORE RoPE: RoPE is undone with ModelFacts::rope_inv_freq
// and the rows' absolute positions (the `positions` quantize() receives, which the
// tier maps through ModelFacts::positions; rotate-half convention, angles in
// double), the pre-RoPE keys quantized and dequantized, and RoPE re-applied. Values
// are quantized per token. Dense-and-sparse: the `outlier_fraction` largest-magnitude entries of
// each (layer, KV head) -- separately for the pre-RoPE keys and for the values --
// are kept exactly (bf16) in a sparse list, and the per-channel / per-token ranges
// are computed without them. Simplification: uniform asymmetric quantization
// stands in for the paper's non-uniform (sensitivity-weighted) datatype, and ranges
// are computed online rather than calibrated offline. Every position is kept; bits
// follow the ratio (2x -> 8, 4x -> 4, 8x -> 2) unless key_bits / value_bits are set.
// Stored bytes: packed codes + fp16 scale/zero per channel (keys) or per token
// (values) + 6 bytes per outlier (bf16 value, int32 index). At 16 bits a side is
// stored in bf16 (keys pre-RoPE).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

/// Rotate-half RoPE of one row at position `pos`; sign -1 undoes it.
void rope_row(float* x, size_t d, const float* inv_freq, double pos, double sign) {
  const size_t h = d / 2;
  for (size_t i = 0; i < h; ++i) {
    const double a = sign * pos * double(inv_freq[i]);
    const double c = std::cos(a), s = std::sin(a);
    const double x1 = x[i], x2 = x[i + h];
    x[i] = float(x1 * c - x2 * s);
    x[i + h] = float(x2 * c + x1 * s);
  }
}

class KvQuant final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "kvquant"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Quantizes pre-RoPE keys per channel and values per token, keeping outliers exact "
           "(KVQuant, Hooper et al., arXiv 2401.18079)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"key_bits", double(bits_.key()), QuantBits::help(true)},
            {"value_bits", double(bits_.value()), QuantBits::help(false)},
            {"outlier_fraction", outlier_fraction_,
             "fraction of entries per (layer, KV head) and side kept exactly in a sparse list"}};
  }

  void set_param(const std::string& name, double value) override {
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("kvquant", name, value);
    } else if (name == "outlier_fraction") {
      if (!(value >= 0.0 && value <= 1.0)) {
        throw Error("kvquant: parameter 'outlier_fraction' must be in [0, 1], got " + std::to_string(value));
      }
      outlier_fraction_ = value;
    } else {
      throw Error("kvquant: unknown parameter '" + name + "' (known: key_bits, value_bits, outlier_fraction)");
    }
  }

  [[nodiscard]] CompressionPlan plan(const CompressorInput& in) const override {
    return keep_all_positions(in.kv, bits_.follow(in.ratio));
  }

  size_t quantize(size_t /*l*/, size_t /*g*/, const int32_t* positions, size_t n, size_t head_dim,
                  const ModelFacts& model, float* k, float* v) const override {
    const size_t d = head_dim;
    if (d % 2 != 0 || model.rope_inv_freq.size() != d / 2) {
      throw Error("kvquant: needs ModelFacts::rope_inv_freq of head_dim / 2 = " + std::to_string(d / 2) +
                  " entries to undo RoPE, got " + std::to_string(model.rope_inv_freq.size()));
    }
    const float* inv = model.rope_inv_freq.data();
    for (size_t r = 0; r < n; ++r) rope_row(k + r * d, d, inv, double(positions[r]), -1.0);
    size_t bytes = side(k, n, d, bits_.key(), /*per_channel=*/true);
    for (size_t r = 0; r < n; ++r) rope_row(k + r * d, d, inv, double(positions[r]), 1.0);
    bytes += side(v, n, d, bits_.value(), /*per_channel=*/false);
    return bytes;
  }

 private:
  /// Dense-and-sparse quantization of the n x d matrix x; returns the stored bytes.
  size_t side(float* x, size_t n, size_t d, int bits, bool per_channel) const {
    const size_t total = n * d;
    if (bits >= 16) {
      round_to_bf16(x, total);
      return total * 2;
    }
    size_t outliers = 0;
    if (outlier_fraction_ > 0) {
      outliers = std::min(total, size_t(std::ceil(outlier_fraction_ * double(total) - 1e-9)));
    }
    std::vector<uint8_t> skip(total, 0);
    if (outliers > 0) {
      std::vector<size_t> idx(total);
      std::iota(idx.begin(), idx.end(), size_t(0));
      auto larger = [x](size_t a, size_t b) {
        const float ma = std::fabs(x[a]), mb = std::fabs(x[b]);
        return ma != mb ? ma > mb : a < b;
      };
      std::nth_element(idx.begin(), idx.begin() + std::ptrdiff_t(outliers - 1), idx.end(), larger);
      for (size_t i = 0; i < outliers; ++i) {
        skip[idx[i]] = 1;
        round_to_bf16(x + idx[i], 1);
      }
    }
    if (per_channel) {
      for (size_t c = 0; c < d; ++c) (void)quantize_group(x + c, n, d, bits, skip.data() + c);
    } else {
      for (size_t r = 0; r < n; ++r) (void)quantize_group(x + r * d, d, 1, bits, skip.data() + r * d);
    }
    const size_t scales = (per_channel ? d : n) * 2 * 2;
    return packed_bytes(total, bits) + scales + outliers * (2 + 4);
  }

  QuantBits bits_;
  double outlier_fraction_ = 0.01;
};

}  // namespace

std::unique_ptr<Compressor> make_kvquant() { return std::make_unique<KvQuant>(); }

}  // namespace vc

// KVQuant-style quantization (Hooper et al., "KVQuant: Towards 10 Million Context
// Length LLM Inference with KV Cache Quantization", arXiv 2401.18079). Keys are
// quantized per channel BEFORE RoPE: RoPE is undone with ModelFacts::rope_inv_freq
// and the rows' absolute positions (the `positions` quantize() receives, which the
// tier maps through ModelFacts::positions; rotate-half convention, in float with
// the angles' cos and sin computed in double: cpu::rope_row), the pre-RoPE keys
// quantized and dequantized, and RoPE re-applied. Values
// are quantized per token. Dense-and-sparse: the `outlier_fraction` largest-magnitude entries of
// each (layer, KV head) -- separately for the pre-RoPE keys and for the values --
// are kept exactly (bf16) in a sparse list, and the per-channel / per-token ranges
// are computed without them. Simplification: uniform asymmetric quantization
// stands in for the paper's non-uniform (sensitivity-weighted) datatype, and ranges
// are computed online rather than calibrated offline. Every position is kept.
// Stored bytes: packed codes + fp16 scale/zero per group + 6 bytes per outlier
// (bf16 value, int32 index). A key group is `group_span` channels over all tokens
// (1: per channel), a value group `group_span` tokens over all channels (1: per
// token). At 16 bits a side is stored in bf16 (keys pre-RoPE).
//
// The ratio mapping (plan): the stored bytes of all kept rows must fit full bf16
// bytes / ratio (up to kRatioSlack). Tried in order, the first fit wins: bits 8,
// 4, 3, 2; for each, group_span 1, 2, 4, ... (until one group covers a head's
// side); for each, the largest outlier fraction <= the parameter (1%) that fits.
// When nothing fits, the cheapest setting is used (the achieved ratio is then
// below the ask). key_bits / value_bits / outlier_fraction / group_span set with
// set_param are kept.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

/// Rotate-half RoPE of one row at position `pos`; sign -1 undoes it.
void rope_row(float* x, size_t d, const float* inv_freq, int32_t pos, float sign) {
  if (pos < 0) throw Error("kvquant: negative position " + std::to_string(pos));
  rope_rotate_half(x, d, inv_freq, size_t(pos), sign);
}

struct KvQuantSettings {
  int key_bits = 4, value_bits = 4;
  size_t span = 1;
  double outlier_fraction = 0.01;
};

/// Outliers kept exactly among `total` entries of one side.
size_t outlier_count(double fraction, size_t total) {
  if (!(fraction > 0)) return 0;
  return std::min(total, size_t(std::ceil(fraction * double(total) - 1e-9)));
}

/// Groups: keys `span` channels over all n tokens, values `span` tokens over all
/// channels.
BlockShape side_shape(size_t span, size_t n, size_t d, bool per_channel) {
  if (per_channel) return {std::max<size_t>(n, 1), std::clamp<size_t>(span, 1, std::max<size_t>(d, 1))};
  return {std::clamp<size_t>(span, 1, std::max<size_t>(n, 1)), d};
}

size_t side_bytes(const KvQuantSettings& s, size_t n, size_t d, int bits, bool per_channel) {
  if (bits >= 16) return n * d * 2;
  return blocks_bytes(n, d, side_shape(s.span, n, d, per_channel), bits) +
         outlier_count(s.outlier_fraction, n * d) * (2 + 4);
}

size_t head_bytes(const KvQuantSettings& s, size_t n, size_t d) {
  return side_bytes(s, n, d, s.key_bits, true) + side_bytes(s, n, d, s.value_bits, false);
}

class KvQuant final : public Quantizer {
 public:
  [[nodiscard]] std::string_view name() const override { return "kvquant"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Quantizes pre-RoPE keys per channel and values per token, keeping outliers exact "
           "(KVQuant, Hooper et al., arXiv 2401.18079)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    const KvQuantSettings s = now_.get();
    return {{"key_bits", double(s.key_bits), QuantBits::help(true)},
            {"value_bits", double(s.value_bits), QuantBits::help(false)},
            {"outlier_fraction", s.outlier_fraction,
             "fraction of entries per (layer, KV head) and side kept exactly in a sparse list; "
             "unless set, at most 0.01, less as the ratio needs"},
            {"group_span", double(s.span),
             "channels per key group (over all tokens) and tokens per value group (over all "
             "channels); unless set, 1 doubled as the ratio needs"}};
  }

  void set_param(const std::string& name, double value) override {
    KvQuantSettings s = now_.get();
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("kvquant", name, value);
      if (bits_.key_override() != 0) s.key_bits = bits_.key_override();
      if (bits_.value_override() != 0) s.value_bits = bits_.value_override();
    } else if (name == "outlier_fraction") {
      if (!(value >= 0.0 && value <= 1.0)) {
        throw Error("kvquant: parameter 'outlier_fraction' must be in [0, 1], got " + std::to_string(value));
      }
      s.outlier_fraction = outlier_fraction_ = value;
      outlier_set_ = true;
    } else if (name == "group_span") {
      s.span = span_ = size_t(int_param("kvquant", name, value, 1, 1 << 30));
      span_set_ = true;
    } else {
      throw Error("kvquant: unknown parameter '" + name +
                  "' (known: key_bits, value_bits, outlier_fraction, group_span)");
    }
    now_.set(s);
  }

  QuantSpec plan_rows(const QuantTarget& t) const override {
    const size_t d = t.head_dim, nmax = t.max_rows();
    std::vector<size_t> spans = {span_};
    if (!span_set_) {
      for (size_t g = span_; g < std::max(d, nmax);) spans.push_back(g *= 2);
    }
    auto total = [&](const KvQuantSettings& s) {
      size_t bytes = 0;
      for (size_t n : t.rows) bytes += head_bytes(s, n, d);
      return bytes;
    };
    KvQuantSettings best;
    size_t best_bytes = std::numeric_limits<size_t>::max();
    for (const QuantSpec& bits : bits_.candidates()) {
      for (size_t span : spans) {
        KvQuantSettings s{bits.key_bits, bits.value_bits, span, outlier_fraction_};
        const size_t at_param = total(s);
        if (t.fits(at_param)) return record(s);
        if (outlier_set_) {
          if (at_param < best_bytes) best = s, best_bytes = at_param;
          continue;
        }
        s.outlier_fraction = 0;
        const size_t at_zero = total(s);
        if (at_zero < best_bytes) best = s, best_bytes = at_zero;
        if (!t.fits(at_zero)) continue;
        double lo = 0, hi = outlier_fraction_;  // lo fits, hi does not
        for (int i = 0; i < 60; ++i) {
          KvQuantSettings m = s;
          m.outlier_fraction = (lo + hi) / 2;
          (t.fits(total(m)) ? lo : hi) = m.outlier_fraction;
        }
        s.outlier_fraction = lo;
        return record(s);
      }
    }
    return record(best);  // nothing fits: the cheapest
  }

  [[nodiscard]] bool stores_keys_before_rope() const override { return true; }

  [[nodiscard]] size_t head_stored_bytes(size_t n, size_t head_dim) const override {
    return head_bytes(now_.get(), n, head_dim);
  }

  size_t quantize(size_t /*l*/, size_t /*g*/, const int32_t* positions, size_t n, size_t head_dim,
                  const ModelFacts& model, float* k, float* v,
                  PackedHead* packed = nullptr) const override {
    const size_t d = head_dim;
    if (d % 2 != 0 || model.rope_inv_freq.size() != d / 2) {
      throw Error("kvquant: needs ModelFacts::rope_inv_freq of head_dim / 2 = " + std::to_string(d / 2) +
                  " entries to undo RoPE, got " + std::to_string(model.rope_inv_freq.size()));
    }
    const KvQuantSettings s = now_.get();
    const float* inv = model.rope_inv_freq.data();
    for (size_t r = 0; r < n; ++r) rope_row(k + r * d, d, inv, positions[r], -1.f);
    side(s, k, n, d, s.key_bits, /*per_channel=*/true, packed ? &packed->k : nullptr);
    for (size_t r = 0; r < n; ++r) rope_row(k + r * d, d, inv, positions[r], 1.f);
    side(s, v, n, d, s.value_bits, /*per_channel=*/false, packed ? &packed->v : nullptr);
    if (packed) {
      packed->k.transform = PackedTransform::rope;  // keys were quantized pre-RoPE
      packed->described = true;
    }
    return head_bytes(s, n, d);
  }

 private:
  QuantSpec record(const KvQuantSettings& s) const {
    now_.set(s);
    return QuantSpec{s.key_bits, s.value_bits};
  }

  /// Dense-and-sparse quantization of the n x d matrix x (side_bytes() bytes).
  /// Records what is stored in `packed` when given.
  static void side(const KvQuantSettings& s, float* x, size_t n, size_t d, int bits, bool per_channel,
                   PackedSide* packed) {
    const size_t total = n * d;
    if (bits >= 16) {
      round_to_bf16(x, total, packed);
      return;
    }
    const size_t outliers = outlier_count(s.outlier_fraction, total);
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
      if (packed) {
        std::sort(idx.begin(), idx.begin() + std::ptrdiff_t(outliers));
        for (size_t i = 0; i < outliers; ++i) {
          packed->outlier_index.push_back(uint32_t(idx[i]));
          packed->outlier_value.push_back(f32_to_bf16(x[idx[i]]));
        }
      }
    }
    quantize_blocks(x, n, d, side_shape(s.span, n, d, per_channel), bits, skip.data(), packed);
  }

  QuantBits bits_;
  double outlier_fraction_ = 0.01;
  size_t span_ = 1;
  bool outlier_set_ = false, span_set_ = false;
  Recorded<KvQuantSettings> now_;  // in force: set_param, then the last plan
};

}  // namespace

std::unique_ptr<Compressor> make_kvquant() { return std::make_unique<KvQuant>(); }

}  // namespace vc

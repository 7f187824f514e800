// KIVI (Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
// Cache", arXiv 2402.02750). Keys are quantized per channel: an asymmetric min/max
// range over each group of `group_size` consecutive tokens of a channel. Values are
// quantized per token: a range over each group of `group_size` channels of a row.
// The `residual` most recent rows stay in full precision (bf16), as KIVI keeps its
// streaming window; a trailing partial key group (fewer than group_size tokens
// before the residual) is quantized as a smaller group with its own scales. Every
// position is kept; only the precision changes.
//
// The ratio mapping (plan): the stored bytes of all kept rows -- packed codes, an
// fp16 scale and zero per group, the bf16 residual rows -- must fit full bf16
// bytes / ratio (up to kRatioSlack). Tried in order, the first fit wins: bits 8,
// 4, 3, 2; for each, group_size 32, 64, 128, ... (doubling until one group covers
// a head); for each, residual = the largest of param..0 that fits. A group of more
// than the quantized rows spans several channels for keys (group_size / rows
// channels of every row); one of more than head_dim channels spans several tokens
// for values (group_size / head_dim whole rows) -- a departure from the paper's
// per-token value groups that only high ratios on short prompts need. When nothing
// fits, the cheapest setting is used (the achieved ratio is then below the ask).
// key_bits / value_bits / group_size / residual set with set_param are kept.
#include <algorithm>
#include <limits>
#include <string>
#include <tuple>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

struct KiviSettings {
  int key_bits = 4, value_bits = 4;
  size_t group = 32, residual = 32;
};

/// Key groups: `group` tokens of one channel; past the quantized rows, whole
/// columns of group / rows channels.
BlockShape key_shape(size_t group, size_t rows, size_t d) {
  if (group <= rows) return {group, 1};
  const size_t r = std::max<size_t>(rows, 1);
  return {r, std::clamp<size_t>(group / r, 1, std::max<size_t>(d, 1))};
}

/// Value groups: `group` channels of one token; past head_dim, group / head_dim
/// whole rows.
BlockShape value_shape(size_t group, size_t rows, size_t d) {
  if (group <= d) return {1, group};
  return {std::clamp<size_t>(group / std::max<size_t>(d, 1), 1, std::max<size_t>(rows, 1)), d};
}

/// Stored bytes of one (layer, KV head) of n rows.
size_t head_bytes(const KiviSettings& s, size_t n, size_t d) {
  const size_t r = std::min(s.residual, n), nq = n - r;
  auto side = [&](int bits, BlockShape shape) {
    return bits >= 16 ? n * d * 2 : blocks_bytes(nq, d, shape, bits) + r * d * 2;
  };
  return side(s.key_bits, key_shape(s.group, nq, d)) + side(s.value_bits, value_shape(s.group, nq, d));
}

class Kivi final : public Quantizer {
 public:
  [[nodiscard]] std::string_view name() const override { return "kivi"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Quantizes keys per channel and values per token (asymmetric, 2/3/4/8 bit), recent "
           "rows in bf16 (KIVI, Liu et al., arXiv 2402.02750)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    const KiviSettings s = now_.get();
    return {{"key_bits", double(s.key_bits), QuantBits::help(true)},
            {"value_bits", double(s.value_bits), QuantBits::help(false)},
            {"group_size", double(s.group),
             "tokens per key group (per channel) and channels per value group (per token); "
             "unless set, 32 doubled as the ratio needs"},
            {"residual", double(s.residual),
             "most recent rows kept in bf16; unless set, at most 32, fewer as the ratio needs"}};
  }

  void set_param(const std::string& name, double value) override {
    KiviSettings s = now_.get();
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("kivi", name, value);
      if (bits_.key_override() != 0) s.key_bits = bits_.key_override();
      if (bits_.value_override() != 0) s.value_bits = bits_.value_override();
    } else if (name == "group_size") {
      s.group = group_ = size_t(int_param("kivi", name, value, 1, 1 << 30));
      group_set_ = true;
    } else if (name == "residual") {
      s.residual = residual_ = size_t(int_param("kivi", name, value, 0, 1 << 30));
      residual_set_ = true;
    } else {
      throw Error("kivi: unknown parameter '" + name +
                  "' (known: key_bits, value_bits, group_size, residual)");
    }
    now_.set(s);
  }

  QuantSpec plan_rows(const QuantTarget& t) const override {
    const size_t d = t.head_dim, nmax = t.max_rows();
    std::vector<size_t> groups = {group_};
    if (!group_set_) {
      for (size_t g = group_; g < nmax * d;) groups.push_back(g *= 2);
    }
    const size_t r_hi = residual_set_ ? residual_ : std::min(residual_, nmax);
    const size_t r_lo = residual_set_ ? residual_ : 0;
    KiviSettings best;
    size_t best_bytes = std::numeric_limits<size_t>::max();
    for (const QuantSpec& bits : bits_.candidates()) {
      for (size_t g : groups) {
        for (size_t r = r_hi + 1; r-- > r_lo;) {
          const KiviSettings s{bits.key_bits, bits.value_bits, g, r};
          size_t bytes = 0;
          for (size_t n : t.rows) bytes += head_bytes(s, n, d);
          if (t.fits(bytes)) return record(s);
          if (bytes < best_bytes) best = s, best_bytes = bytes;
        }
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
    const KiviSettings s = now_.get();
    const size_t d = head_dim, r = std::min(s.residual, n), nq = n - r;
    // Keys per channel, values per token; the residual rows (and a side at 16
    // bits) in bf16.
    for (auto [x, bits, shape, side] :
         {std::tuple{k, s.key_bits, key_shape(s.group, nq, d), packed ? &packed->k : nullptr},
          std::tuple{v, s.value_bits, value_shape(s.group, nq, d), packed ? &packed->v : nullptr}}) {
      const size_t q = bits >= 16 ? 0 : nq;
      if (q > 0) quantize_blocks(x, q, d, shape, bits, nullptr, side);
      round_to_bf16(x + q * d, (n - q) * d, side);
    }
    if (packed) packed->described = true;
    return head_bytes(s, n, d);
  }

 private:
  QuantSpec record(const KiviSettings& s) const {
    now_.set(s);
    return QuantSpec{s.key_bits, s.value_bits};
  }

  QuantBits bits_;
  size_t group_ = 32, residual_ = 32;
  bool group_set_ = false, residual_set_ = false;
  Recorded<KiviSettings> now_;  // in force: set_param, then the last plan
};

}  // namespace

std::unique_ptr<Compressor> make_kivi() { return std::make_unique<Kivi>(); }

}  // namespace vc

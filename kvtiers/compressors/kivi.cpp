// KIVI (Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
// Cache", arXiv 2402.02750). Keys are quantized per channel: for each channel, an
// asymmetric min/max range over each group of `group_size` consecutive tokens.
// Values are quantized per token: a range over each group of `group_size` channels
// of a row. The `residual` most recent rows (and, for keys, any trailing partial
// token group) stay in full precision (bf16), as KIVI keeps its streaming window.
// Every position is kept; only the precision changes. Bits follow the ratio
// (2x -> 8, 4x -> 4, 8x -> 2) unless key_bits / value_bits are set.
#include <algorithm>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

class Kivi final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "kivi"; }
  [[nodiscard]] std::string_view summary() const override {
    return "Quantizes keys per channel and values per token (asymmetric, 2/4/8 bit), recent "
           "rows in bf16 (KIVI, Liu et al., arXiv 2402.02750)";
  }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"key_bits", double(bits_.key()), QuantBits::help(true)},
            {"value_bits", double(bits_.value()), QuantBits::help(false)},
            {"group_size", double(group_size_),
             "tokens per key group (per channel) and channels per value group (per token)"},
            {"residual", double(residual_), "most recent rows kept in bf16"}};
  }

  void set_param(const std::string& name, double value) override {
    if (name == "key_bits" || name == "value_bits") {
      bits_.set("kivi", name, value);
    } else if (name == "group_size") {
      group_size_ = size_t(int_param("kivi", name, value, 1, 1 << 16));
    } else if (name == "residual") {
      residual_ = size_t(int_param("kivi", name, value, 0, 1 << 30));
    } else {
      throw Error("kivi: unknown parameter '" + name +
                  "' (known: key_bits, value_bits, group_size, residual)");
    }
  }

  [[nodiscard]] CompressionPlan plan(const CompressorInput& in) const override {
    return keep_all_positions(in.kv, bits_.follow(in.ratio));
  }

  size_t quantize(size_t /*l*/, size_t /*g*/, const int32_t* /*positions*/, size_t n,
                  size_t head_dim, const ModelFacts& /*model*/, float* k,
                  float* v) const override {
    const size_t d = head_dim, gs = group_size_;
    const size_t nq = n > residual_ ? n - residual_ : 0;  // rows outside the residual
    size_t bytes = 0;

    // Keys: per channel, groups of gs tokens; a trailing partial group stays bf16.
    const int kb = bits_.key();
    const size_t nk = kb >= 16 ? 0 : nq / gs * gs;
    for (size_t t0 = 0; t0 < nk; t0 += gs) {
      for (size_t c = 0; c < d; ++c) (void)quantize_group(k + t0 * d + c, gs, d, kb);
    }
    if (nk > 0) bytes += packed_bytes(nk * d, kb) + (nk / gs) * d * 2 * 2;
    round_to_bf16(k + nk * d, (n - nk) * d);
    bytes += (n - nk) * d * 2;

    // Values: per token, groups of gs channels.
    const int vb = bits_.value();
    const size_t nv = vb >= 16 ? 0 : nq;
    const size_t groups_per_row = (d + gs - 1) / gs;
    for (size_t r = 0; r < nv; ++r) {
      for (size_t c0 = 0; c0 < d; c0 += gs) (void)quantize_group(v + r * d + c0, std::min(gs, d - c0), 1, vb);
    }
    if (nv > 0) bytes += packed_bytes(nv * d, vb) + nv * groups_per_row * 2 * 2;
    round_to_bf16(v + nv * d, (n - nv) * d);
    bytes += (n - nv) * d * 2;
    return bytes;
  }

 private:
  QuantBits bits_;
  size_t group_size_ = 32;
  size_t residual_ = 32;
};

}  // namespace

std::unique_ptr<Compressor> make_kivi() { return std::make_unique<Kivi>(); }

}  // namespace vc

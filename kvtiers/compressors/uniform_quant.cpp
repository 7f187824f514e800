// Asymmetric min/max uniform quantization with fp16 scale and zero-point, the byte
// budget of a ratio, and the bit-width bookkeeping shared by the KV quantizers.
#include "kvtiers/compressors/uniform_quant.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc {

namespace {

void check_ratio(double ratio) {
  if (!(ratio >= 1.0) || !std::isfinite(ratio)) {
    throw Error("compression ratio must be a finite number >= 1, got " + std::to_string(ratio));
  }
}

}  // namespace

GroupQuant quantize_block(float* x, size_t rows, size_t cols, size_t ld, int bits,
                          const uint8_t* skip, uint16_t* codes) {
  if (bits < 1 || bits > 16) throw Error("quantize_group: bits must be in 1..16, got " + std::to_string(bits));
  float lo = std::numeric_limits<float>::infinity();
  float hi = -lo;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = r * ld + c;
      if (skip && skip[i]) continue;
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  if (lo > hi) return {};  // nothing to quantize
  const float levels = float((1u << bits) - 1u);
  GroupQuant q;
  q.zero = f16_to_f32(f32_to_f16(lo));
  q.scale = f16_to_f32(f32_to_f16((hi - lo) / levels));
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const size_t i = r * ld + c;
      if (skip && skip[i]) continue;
      float& e = x[i];
      float code = 0;
      if (q.scale > 0) code = std::clamp(std::nearbyint((e - q.zero) / q.scale), 0.0f, levels);
      e = dequantize_code(q.zero, q.scale, code);
      if (codes) codes[i] = uint16_t(code);
    }
  }
  return q;
}

GroupQuant quantize_group(float* x, size_t count, size_t stride, int bits, const uint8_t* skip,
                          uint16_t* codes) {
  return quantize_block(x, count, 1, stride, bits, skip, codes);
}

void quantize_blocks(float* x, size_t n, size_t d, BlockShape shape, int bits, const uint8_t* skip,
                     PackedSide* packed) {
  if (bits >= 16) {
    round_to_bf16(x, n * d, packed);
    return;
  }
  const size_t br = std::max<size_t>(shape.rows, 1), bc = std::max<size_t>(shape.cols, 1);
  std::vector<uint16_t> codes(packed ? n * d : 0, 0);
  std::vector<float> scale_zero;
  for (size_t r0 = 0; r0 < n; r0 += br) {
    for (size_t c0 = 0; c0 < d; c0 += bc) {
      const size_t off = r0 * d + c0;
      const GroupQuant q = quantize_block(x + off, std::min(br, n - r0), std::min(bc, d - c0), d,
                                          bits, skip ? skip + off : nullptr,
                                          packed ? codes.data() + off : nullptr);
      scale_zero.push_back(q.scale);
      scale_zero.push_back(q.zero);
    }
  }
  if (packed) pack_quantized(*packed, n, d, {br, bc}, bits, codes, scale_zero);
}

size_t blocks_bytes(size_t n, size_t d, BlockShape shape, int bits) {
  if (bits >= 16) return n * d * 2;
  const size_t br = std::max<size_t>(shape.rows, 1), bc = std::max<size_t>(shape.cols, 1);
  const size_t blocks = ((n + br - 1) / br) * ((d + bc - 1) / bc);
  return packed_bytes(n * d, bits) + blocks * 2 * 2;
}

void round_to_bf16(float* x, size_t n, PackedSide* packed) {
  for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  if (packed) pack_bf16(*packed, x, n);
}

size_t packed_bytes(size_t count, int bits) { return (count * size_t(bits) + 7) / 8; }

int bits_for_ratio(double ratio) {
  check_ratio(ratio);
  const double budget = 16.0 / ratio;
  for (int b : kRatioBits) {
    if (double(b) <= budget * (1 + 1e-9)) return b;
  }
  return 2;
}

bool QuantTarget::fits(size_t bytes) const { return double(bytes) <= budget; }

size_t QuantTarget::max_rows() const {
  size_t m = 0;
  for (size_t r : rows) m = std::max(m, r);
  return m;
}

QuantTarget quant_target(const KvShape& shape, std::vector<size_t> rows, double ratio) {
  check_ratio(ratio);
  if (rows.size() != shape.layers * shape.kv_heads) {
    throw Error("quant_target: " + std::to_string(rows.size()) + " row counts for " +
                std::to_string(shape.layers * shape.kv_heads) + " (layer, KV head) pairs");
  }
  QuantTarget t;
  t.rows = std::move(rows);
  t.head_dim = shape.head_dim;
  const double full =
      double(shape.layers * shape.kv_heads * shape.n_pos * shape.head_dim) * 2 * 2;
  // A hair under the exact quotient, so that fits() implies the achieved ratio.
  t.budget = full / (ratio * kRatioSlack) * (1 - 1e-12);
  return t;
}

int int_param(std::string_view method, const std::string& name, double value, int lo, int hi) {
  if (!(value >= lo && value <= hi) || value != std::floor(value)) {
    throw Error(std::string(method) + ": parameter '" + name + "' must be an integer in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(value));
  }
  return int(value);
}

void QuantBits::set(std::string_view method, const std::string& name, double value) {
  const int b = int_param(method, name, value, 0, 16);
  if (b > 8 && b < 16) {
    throw Error(std::string(method) + ": parameter '" + name +
                "' must be 0 (follow the ratio), 1..8 or 16, got " + std::to_string(b));
  }
  (name == "key_bits" ? key_override_ : value_override_) = b;
}

std::vector<QuantSpec> QuantBits::candidates() const {
  if (key_override_ != 0 && value_override_ != 0) return {QuantSpec{key_override_, value_override_}};
  std::vector<QuantSpec> out;
  for (int b : kRatioBits) {
    out.push_back(QuantSpec{key_override_ != 0 ? key_override_ : b,
                            value_override_ != 0 ? value_override_ : b});
  }
  return out;
}

std::string QuantBits::help(bool key) {
  return std::string(key ? "key" : "value") +
         " bits (16 = bf16); unless set, the largest of 8/4/3/2 whose stored bytes (with "
         "scales and full-precision rows) fit full/ratio; set 0 to follow the ratio again";
}

LayerPlan Quantizer::plan_layer(const LayerInput& in) const {
  std::vector<int32_t> all(in.kv.n_pos);
  for (size_t p = 0; p < all.size(); ++p) all[p] = int32_t(p);
  LayerPlan plan;
  plan.keep.assign(in.kv.kv_heads, all);
  return plan;
}

std::optional<size_t> Quantizer::stored_bytes_bound(const KvShape& shape, double ratio) const {
  const size_t heads = shape.layers * shape.kv_heads;
  (void)plan_quant(shape, std::vector<size_t>(heads, shape.n_pos), ratio);
  return heads * head_stored_bytes(shape.n_pos, shape.head_dim);
}

QuantSpec Quantizer::plan_quant(const KvShape& shape, std::vector<size_t> rows,
                                double ratio) const {
  return plan_rows(quant_target(shape, std::move(rows), ratio));
}

}  // namespace vc

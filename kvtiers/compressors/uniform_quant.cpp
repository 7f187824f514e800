// Asymmetric min/max uniform quantization with fp16 scale and zero-point, and the
// bit-width bookkeeping shared by the KV quantizers.
#include "kvtiers/compressors/uniform_quant.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc {

GroupQuant quantize_group(float* x, size_t count, size_t stride, int bits, const uint8_t* skip) {
  if (bits < 1 || bits > 16) throw Error("quantize_group: bits must be in 1..16, got " + std::to_string(bits));
  float lo = std::numeric_limits<float>::infinity();
  float hi = -lo;
  for (size_t i = 0; i < count; ++i) {
    if (skip && skip[i * stride]) continue;
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  if (lo > hi) return {};  // nothing to quantize
  const float levels = float((1u << bits) - 1u);
  GroupQuant q;
  q.zero = f16_to_f32(f32_to_f16(lo));
  q.scale = f16_to_f32(f32_to_f16((hi - lo) / levels));
  for (size_t i = 0; i < count; ++i) {
    if (skip && skip[i * stride]) continue;
    float& e = x[i * stride];
    float code = 0;
    if (q.scale > 0) code = std::clamp(std::nearbyint((e - q.zero) / q.scale), 0.0f, levels);
    e = q.zero + code * q.scale;
  }
  return q;
}

void round_to_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

size_t packed_bytes(size_t count, int bits) { return (count * size_t(bits) + 7) / 8; }

int bits_for_ratio(double ratio) {
  if (!(ratio >= 1.0) || !std::isfinite(ratio)) {
    throw Error("compression ratio must be a finite number >= 1, got " + std::to_string(ratio));
  }
  const double budget = 16.0 / ratio;
  for (int b : {8, 4, 3, 2}) {
    if (double(b) <= budget * (1 + 1e-9)) return b;
  }
  return 2;
}

CompressionPlan keep_all_positions(const KvSnapshot& kv, QuantSpec quant) {
  CompressionPlan plan;
  plan.quant = quant;
  std::vector<int32_t> all(kv.n_pos);
  for (size_t p = 0; p < kv.n_pos; ++p) all[p] = int32_t(p);
  plan.keep.assign(kv.layers, std::vector<std::vector<int32_t>>(kv.kv_heads, all));
  return plan;
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
  int& over = name == "key_bits" ? key_override_ : value_override_;
  std::atomic<int>& now = name == "key_bits" ? key_ : value_;
  over = b;
  if (b != 0) now = b;
}

QuantSpec QuantBits::follow(double ratio) const {
  const int b = bits_for_ratio(ratio);
  key_ = key_override_ != 0 ? key_override_ : b;
  value_ = value_override_ != 0 ? value_override_ : b;
  return QuantSpec{key_.load(), value_.load()};
}

std::string QuantBits::help(bool key) {
  return std::string(key ? "key" : "value") +
         " bits (16 = bf16); from the ratio unless set: 2x->8, 4x->4, 5x->3, 8x->2 "
         "(largest of 8/4/3/2 <= 16/ratio); set 0 to follow the ratio again";
}

}  // namespace vc

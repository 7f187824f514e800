// Shared pieces of the KV quantizers (KIVI, KVQuant, RotateKV): asymmetric min/max
// uniform quantization of a strided group of values with B-bit codes, whose scale
// and zero-point are stored in fp16, the ratio -> bits mapping, packed-code sizes,
// and the bit-width bookkeeping (set_param overrides, else the plan's ratio).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvtiers/compressor.hpp"

namespace vc {

/// The stored scale and zero-point of one quantized group (fp16 values, as floats).
struct GroupQuant {
  float scale = 0;
  float zero = 0;
};

/// Quantizes the `count` values x[0], x[stride], ... x[(count-1)*stride] with `bits`
/// (1..16) bits: zero = fp16(min), scale = fp16((max - min) / (2^bits - 1)),
/// code = clamp(round((x - zero) / scale), 0, 2^bits - 1), and replaces each value
/// by zero + code * scale (what a real store gives back). Entries with
/// skip[i * stride] != 0 (when `skip` is given) are ignored: neither part of the
/// range nor modified. Returns the stored scale and zero.
GroupQuant quantize_group(float* x, size_t count, size_t stride, int bits,
                          const uint8_t* skip = nullptr);

/// Rounds `n` values to bf16 in place.
void round_to_bf16(float* x, size_t n);

/// Bytes of `count` codes of `bits` bits, packed densely.
[[nodiscard]] size_t packed_bytes(size_t count, int bits);

/// Quantizer bits for a compression ratio: the largest of {8, 4, 3, 2} that is at
/// most 16 / ratio (2x -> 8, 4x -> 4, 5x -> 3, 8x -> 2; anything above 8x -> 2);
/// the fp16 scales and full-precision rows come on top ("roughly" the ratio).
/// Throws vc::Error unless ratio >= 1.
[[nodiscard]] int bits_for_ratio(double ratio);

/// A plan keeping every position of every (layer, KV head), stored with `quant`.
[[nodiscard]] CompressionPlan keep_all_positions(const KvSnapshot& kv, QuantSpec quant);

/// Integer value of parameter `name` of `method` in [lo, hi]; vc::Error otherwise.
[[nodiscard]] int int_param(std::string_view method, const std::string& name, double value,
                            int lo, int hi);

/// Key and value bit widths of a quantizer: an override from set_param ("key_bits",
/// "value_bits"; 0 returns to the ratio mapping), else the bits of the ratio of the
/// last plan() (4x until then). quantize() reads the widths in force.
class QuantBits {
 public:
  /// Sets the key (or value) override; bits in {0 (follow the ratio), 1..8, 16}.
  void set(std::string_view method, const std::string& name, double value);
  /// Records the ratio of a plan (a no-op for overridden sides); returns the widths.
  QuantSpec follow(double ratio) const;
  [[nodiscard]] int key() const { return key_.load(); }
  [[nodiscard]] int value() const { return value_.load(); }
  /// Help text of the key_bits / value_bits parameters.
  [[nodiscard]] static std::string help(bool key);

 private:
  int key_override_ = 0, value_override_ = 0;
  mutable std::atomic<int> key_{4}, value_{4};
};

}  // namespace vc

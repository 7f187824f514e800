// Shared pieces of the KV quantizers (KIVI, KVQuant, RotateKV): asymmetric min/max
// uniform quantization of a block of values with B-bit codes, whose scale and
// zero-point are stored in fp16, packed-code sizes, the byte budget a ratio sets,
// the bit-width overrides, and the Quantizer base whose plan() fits its settings
// (bits, then full-precision rows / outliers / group overhead) into that budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

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
/// range nor modified. Returns the stored scale and zero. When `codes` is given,
/// each quantized value's code is written at the value's index (codes[i * stride]).
GroupQuant quantize_group(float* x, size_t count, size_t stride, int bits,
                          const uint8_t* skip = nullptr, uint16_t* codes = nullptr);

/// The same for the rows x cols block x[r * ld + c] (r < rows, c < cols) as one
/// group (skip and codes laid out like x).
GroupQuant quantize_block(float* x, size_t rows, size_t cols, size_t ld, int bits,
                          const uint8_t* skip = nullptr, uint16_t* codes = nullptr);

/// Quantizes the row-major n x d matrix x block by block (bits >= 16: rounds it to
/// bf16 instead). `skip` as in quantize_group, laid out like x. When `packed` is
/// given, appends what is stored to it: the codes, scales and zeros
/// (pack_quantized; skipped entries get code 0), or at 16 bits the bf16 rows.
void quantize_blocks(float* x, size_t n, size_t d, BlockShape shape, int bits,
                     const uint8_t* skip = nullptr, PackedSide* packed = nullptr);

/// Bytes quantize_blocks stores for an n x d matrix: packed codes plus an fp16 scale
/// and zero per block; 2 bytes per value (bf16) when bits >= 16.
[[nodiscard]] size_t blocks_bytes(size_t n, size_t d, BlockShape shape, int bits);

/// Rounds `n` values to bf16 in place; appends them to packed->full when given.
void round_to_bf16(float* x, size_t n, PackedSide* packed = nullptr);

/// Bytes of `count` codes of `bits` bits, packed densely.
[[nodiscard]] size_t packed_bytes(size_t count, int bits);

/// Nominal quantizer bits for a compression ratio, codes alone: the largest of
/// {8, 4, 3, 2} that is at most 16 / ratio (2x -> 8, 4x -> 4, 5x -> 3, 8x -> 2;
/// anything above 8x -> 2). The quantizers' plan() instead fits the whole stored
/// size (codes, scales, full-precision rows) into the ratio's budget (QuantTarget).
/// Throws vc::Error unless ratio >= 1.
[[nodiscard]] int bits_for_ratio(double ratio);

/// Bit widths a quantizer's plan() tries, best first, when following the ratio.
inline constexpr int kRatioBits[] = {8, 4, 3, 2};

/// A setting fits a ratio r when the achieved ratio (full bf16 bytes / stored
/// bytes) is at least kRatioSlack * r.
inline constexpr double kRatioSlack = 0.95;

/// What a quantizer's plan() must fit: the rows it will store for each (layer, KV
/// head), and the byte budget: the bf16 bytes of every snapshot position (kept or
/// not) / (ratio * kRatioSlack).
struct QuantTarget {
  std::vector<size_t> rows;  // [layers * kv_heads]
  size_t head_dim = 0;
  double budget = 0;  // bytes
  [[nodiscard]] bool fits(size_t bytes) const;
  [[nodiscard]] size_t max_rows() const;
};

/// The target for storing rows[l * kv_heads + g] rows of each head of a request of
/// `shape` at `ratio`. Throws vc::Error unless ratio is finite and >= 1, or on a size
/// mismatch.
[[nodiscard]] QuantTarget quant_target(const KvShape& shape, std::vector<size_t> rows,
                                       double ratio);

/// Integer value of parameter `name` of `method` in [lo, hi]; vc::Error otherwise.
[[nodiscard]] int int_param(std::string_view method, const std::string& name, double value,
                            int lo, int hi);

/// Key and value bit-width overrides of a quantizer ("key_bits", "value_bits"; 0
/// returns to the ratio mapping).
class QuantBits {
 public:
  /// Sets the key (or value) override; bits in {0 (follow the ratio), 1..8, 16}.
  void set(std::string_view method, const std::string& name, double value);
  [[nodiscard]] int key_override() const { return key_override_; }
  [[nodiscard]] int value_override() const { return value_override_; }
  /// The widths to try, best first: kRatioBits for the sides that follow the ratio
  /// (both the same), the override on the others.
  [[nodiscard]] std::vector<QuantSpec> candidates() const;
  /// Help text of the key_bits / value_bits parameters.
  [[nodiscard]] static std::string help(bool key);

 private:
  int key_override_ = 0, value_override_ = 0;
};

/// A value a const plan() records for later quantize() calls (guarded copy).
template <class T>
class Recorded {
 public:
  explicit Recorded(T v = T{}) : v_(std::move(v)) {}
  [[nodiscard]] T get() const {
    std::lock_guard<std::mutex> lock(m_);
    return v_;
  }
  void set(T v) const {
    std::lock_guard<std::mutex> lock(m_);
    v_ = std::move(v);
  }

 private:
  mutable std::mutex m_;
  mutable T v_;
};

/// Base of the quantizers: every layer keeps every position, and plan_quant()
/// chooses the settings with plan_rows() over the row counts it is given (all
/// positions alone; the dropper's kept counts in a drop+quantize composition).
class Quantizer : public Compressor {
 public:
  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override;
  [[nodiscard]] bool quantizes() const override { return true; }
  [[nodiscard]] bool keeps_every_position() const override { return true; }
  [[nodiscard]] QuantSpec plan_quant(const KvShape& shape, std::vector<size_t> rows,
                                     double ratio) const override;
  /// Chooses the settings that store target.rows within target.budget -- the
  /// largest bits of kRatioBits that fit, then as little loss of full-precision
  /// rows / outliers and group growth as needed -- or, when nothing fits, the
  /// cheapest; set_param overrides are kept. Records them for quantize() and
  /// params(); returns the bit widths.
  virtual QuantSpec plan_rows(const QuantTarget& target) const = 0;
  /// plan_quant() with every head keeping all shape.n_pos positions, then the
  /// planned settings' bytes.
  [[nodiscard]] std::optional<size_t> stored_bytes_bound(const KvShape& shape,
                                                         double ratio) const override;
  /// Stored bytes of one (layer, KV head) of n rows under the recorded settings.
  [[nodiscard]] virtual size_t head_stored_bytes(size_t n, size_t head_dim) const = 0;
};

}  // namespace vc

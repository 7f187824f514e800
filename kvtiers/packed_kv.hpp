// How the compressed tier holds one (layer, KV head)'s kept rows at the plan's
// precision: per side (K, V), packed B-bit codes with an fp16 scale and zero per
// quantization block, bf16 rows kept at full precision, a sparse list of exact
// (bf16) outliers, and the per-row transform to apply after dequantization
// (RotateKV's inverse Hadamard, KVQuant's RoPE). decode() reproduces bit for bit
// the fp32 values the codec's quantize() writes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/cpu/dequant_attention.hpp"

namespace vc {

/// Shape of the quantization groups of an [n, d] matrix: blocks of `rows`
/// consecutive rows by `cols` consecutive channels, tiled from (0, 0); the last
/// blocks of each axis may be partial (a smaller group, with its own scale/zero).
struct BlockShape {
  size_t rows = 1, cols = 1;
};

/// Applied to each row of a side after its values are dequantized.
enum class PackedTransform : uint8_t {
  none,
  hadamard,  // the normalised Walsh-Hadamard transform (its own inverse)
  rope,      // rotate-half RoPE at the row's absolute position
};

/// One side (K or V) of a head's n x d kept rows, as held. Rows [0, quant_rows) are
/// quantized with `bits`-bit codes (packed LSB first, row-major) in blocks of
/// `block`, block order row-major over the tiles, each block with an fp16 scale and
/// zero: value = zero + code * scale. Rows [quant_rows, n) are bf16 (`full`). Then
/// every outlier (element index, bf16 value) replaces its element, and `transform`
/// is applied to each row. A codec that does not describe its storage leaves its
/// values in `raw` (fp32 rows) instead, or in `full` when they are all bf16.
struct PackedSide {
  int bits = 16;
  size_t quant_rows = 0;
  BlockShape block;
  std::vector<uint16_t> scale, zero;  // fp16 bits, one per block
  std::vector<uint8_t> codes;         // quant_rows * d codes of `bits` bits
  std::vector<uint16_t> full;         // bf16 bits, (n - quant_rows) * d
  std::vector<uint32_t> outlier_index;
  std::vector<uint16_t> outlier_value;  // bf16 bits
  std::vector<float> raw;               // fp32 rows (undescribed codecs only)
  PackedTransform transform = PackedTransform::none;

  /// Writes the n x d fp32 values into `out`. `positions` (absolute, n of them) and
  /// `inv_freq` (d / 2) are read only for the rope transform.
  void decode(float* out, size_t n, size_t d, const int32_t* positions,
              const float* inv_freq) const;
  /// Rows [r0, r1) of those n x d values, bit-identical to the same rows of
  /// decode(), into `out` ([r1 - r0, d]): the drafter dequantizes a block of rows
  /// right before attending to it instead of the whole side. `positions` holds all
  /// n positions. Needs outlier_index ascending (as every codec records it).
  /// With apply_transform false, a hadamard side's rows stay rotated (the basis
  /// the drafter can attend in: cpu::DenseKvHead::hadamard).
  void decode_rows(float* out, size_t r0, size_t r1, size_t n, size_t d,
                   const int32_t* positions, const float* inv_freq,
                   bool apply_transform = true) const;
  /// The quantized rows as the drafter's kernel reads them from their codes
  /// (cpu::QuantRows, pointing into this side), when decode() gives them as
  /// zero + code * scale: packed codes, no transform (with `rotated`, a hadamard
  /// transform is allowed: the codes then give the rotated rows). Outliers are
  /// listed with their values, which the kernel blends in. nullopt otherwise.
  /// A rope side (pre-RoPE keys) is given with `positions` (n) and `inv_freq`
  /// (d / 2) for the kernel to apply RoPE; nullopt without them.
  [[nodiscard]] std::optional<cpu::QuantRows> quant_rows_view(size_t n, bool rotated = false,
                                                              const int32_t* positions = nullptr,
                                                              const float* inv_freq = nullptr) const;
  /// Bytes held by the vectors above.
  [[nodiscard]] size_t held_bytes() const;
};

/// What a codec's quantize() stores for one (layer, KV head). The codec sets
/// `described` once it has filled k and v.
struct PackedHead {
  bool described = false;
  PackedSide k, v;
};

/// Records into `side` the rows [0, n) of an n x d matrix as `quant_rows` = n rows
/// of `bits`-bit codes (codes: n * d values, row-major) with per-block fp16 scales
/// and zeros (scale_zero: 2 floats per block, block order row-major).
void pack_quantized(PackedSide& side, size_t n, size_t d, BlockShape block, int bits,
                    const std::vector<uint16_t>& codes, const std::vector<float>& scale_zero);

/// Records `count` values (each exactly a bf16 value) as side.full.
void pack_bf16(PackedSide& side, const float* x, size_t count);

/// value = zero + code * scale: the dequantization every codec, decode() and
/// decode_rows() (through cpu::dequantize_rows, unfused on every SIMD path) share.
[[nodiscard]] inline float dequantize_code(float zero, float scale, float code) {
  return zero + code * scale;  // baseline x86-64 build: no FMA contraction
}

/// Rotate-half RoPE of one row of d values at position `pos` (cpu::rope_row: in
/// float, the angles' cos and sin from cpu::rope_table); sign -1 undoes it.
void rope_rotate_half(float* x, size_t d, const float* inv_freq, size_t pos, float sign);

}  // namespace vc

// Attention over quantized KV rows straight from their packed codes: the drafter's
// attention over a quantized compressed view (KIVI, KVQuant, ...) dequantizes each
// K and V vector in registers inside the attention kernel (zero + code * scale, the
// multiply and the add rounded separately, as dequantize_rows writes them) instead
// of writing a block of fp32 rows first and reading it back. Every value reaching
// the attention arithmetic equals the one dequantize_rows writes, and the
// arithmetic is attention_kernel.hpp's, so the bits equal attending to the
// dequantized rows -- except for KIVI's layout (keys per column, values per groups
// of a row) on the vector paths, where the dequantization is factored out of the
// inner loops (factored_attention_kernel.hpp): the same result up to float rounding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vc::cpu {

/// One side (K or V) of a head's quantized rows, as plain pointers: rows [0, rows)
/// of d codes each, `bits` bits a code (1..16; packed densely, least significant bit
/// first, row-major; codes_bytes bytes), quantized in blocks of block_rows x
/// block_cols tiled from (0, 0) (the last blocks of each axis may be partial), block
/// order row-major, each block with an fp16 zero and scale: value = zero + code *
/// scale. The `n_outliers` elements at `outliers` (element indices r * d + c,
/// ascending) hold other values: `outlier_values` (bf16 bits, one per index) when
/// given, which the kernel blends in over the dequantized lanes; without them rows
/// holding an outlier are not attended from the codes.
struct QuantRows {
  const uint8_t* codes = nullptr;
  size_t codes_bytes = 0;
  int bits = 0;
  size_t rows = 0;
  size_t block_rows = 1, block_cols = 1;
  const uint16_t* zero = nullptr;   // fp16 bits, one per block
  const uint16_t* scale = nullptr;  // fp16 bits, one per block
  const uint32_t* outliers = nullptr;
  size_t n_outliers = 0;
  const uint16_t* outlier_values = nullptr;
  /// Set for keys stored before RoPE (KVQuant): after dequantization and outliers,
  /// each row gets rotate-half RoPE at rope_positions[r] (absolute, one per row) with
  /// these d / 2 frequencies (cpu::rope_row's arithmetic and cpu::rope_table's cos
  /// and sin, as the compressed tier decodes them).
  const float* rope_inv_freq = nullptr;
  const int32_t* rope_positions = nullptr;
};

/// True when rows [r0, r1) of q (d columns) are all quantized and hold no outlier:
/// their values are exactly zero + code * scale.
[[nodiscard]] bool quant_rows_plain(const QuantRows& q, size_t d, size_t r0, size_t r1);
/// True when the kernel can read rows [r0, r1) of q from the codes: all quantized,
/// any outlier among them has its value (QuantRows::outlier_values), and d is a
/// multiple of 32 if the rows get RoPE (a row's halves in whole vectors).
[[nodiscard]] bool quant_rows_readable(const QuantRows& q, size_t d, size_t r0, size_t r1);

/// One side of one block of rows as the kernel reads it: codes from code index
/// `first` (row t's codes start at first + t * d) with per-row zeros and scales as
/// fp32: zero[t][c] per column (padded with zeros to a multiple of 16 columns), or
/// with `broadcast`, per group: zero[t][c / group_cols] (group_cols a multiple of 16
/// or at least d, so that no vector of a path straddles two groups). Outliers, when
/// the block has any: row t's bit c of patch_mask[t * patch_words + c / 64] says
/// column c is patch[t * patch_stride + c] (fp32) instead of its code's value.
struct QuantSideBlock {
  const uint8_t* codes = nullptr;
  size_t codes_bytes = 0;
  int bits = 0;
  size_t first = 0;
  const float* const* zero = nullptr;
  const float* const* scale = nullptr;
  bool broadcast = false;
  size_t group_cols = 1;
  const uint64_t* patch_mask = nullptr;  // null: no outliers in the block
  const float* patch = nullptr;
  size_t patch_words = 0, patch_stride = 0;
  /// Keys stored before RoPE: row t's cos (d / 2 floats), then sin, at its position
  /// (cpu::rope_table's row).
  const float* const* rope = nullptr;
};

/// The fp32 zeros and scales of one side's blocks of rows, converted from fp16 once
/// per group row and reused while consecutive blocks share it (KIVI's keys: one
/// group row per group_size tokens). Holds pointers into the QuantRows' arrays: use
/// one per (head, side) and reset() it before another.
class QuantBlockParams {
 public:
  /// Fills `out` for rows [r0, r0 + rows) of q (d columns), the outliers among them
  /// as its patch (quant_rows_readable() must hold). Valid until the next prepare()
  /// or reset().
  void prepare(const QuantRows& q, size_t d, size_t r0, size_t rows, QuantSideBlock& out);
  void reset() { src_ = nullptr; }

 private:
  std::vector<float> zero_, scale_, patch_;
  std::vector<uint64_t> patch_mask_;
  std::vector<const float*> rope_rows_;
  std::vector<const float*> zero_rows_, scale_rows_;
  const QuantRows* src_ = nullptr;
  size_t first_ = 0, last_ = 0, per_row_ = 0;
  bool broadcast_ = false;
};

}  // namespace vc::cpu

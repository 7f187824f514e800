// Attention over quantized KV rows straight from their packed codes: the drafter's
// attention over a quantized compressed view (KIVI, KVQuant, ...) dequantizes each
// K and V vector in registers inside the attention kernel (zero + code * scale, the
// multiply and the add rounded separately, as dequantize_rows writes them) instead
// of writing a block of fp32 rows first and reading it back. Every value reaching
// the attention arithmetic equals the one dequantize_rows writes, and the
// arithmetic is attention_kernel.hpp's, so the bits equal attending to the
// dequantized rows.
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
/// ascending) hold other values: rows holding one are not attended from the codes.
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
};

/// True when rows [r0, r1) of q (d columns) are all quantized and hold no outlier:
/// their values are exactly zero + code * scale.
[[nodiscard]] bool quant_rows_plain(const QuantRows& q, size_t d, size_t r0, size_t r1);

/// One side of one block of rows as the kernel reads it: codes from code index
/// `first` (row t's codes start at first + t * d) with per-row zeros and scales as
/// fp32: zero[t][c] per column (padded with zeros to a multiple of 16 columns), or
/// with `broadcast`, per group: zero[t][c / group_cols] (group_cols a multiple of 16
/// or at least d, so that no vector of a path straddles two groups).
struct QuantSideBlock {
  const uint8_t* codes = nullptr;
  size_t codes_bytes = 0;
  int bits = 0;
  size_t first = 0;
  const float* const* zero = nullptr;
  const float* const* scale = nullptr;
  bool broadcast = false;
  size_t group_cols = 1;
};

/// The fp32 zeros and scales of one side's blocks of rows, converted from fp16 once
/// per group row and reused while consecutive blocks share it (KIVI's keys: one
/// group row per group_size tokens). Holds pointers into the QuantRows' arrays: use
/// one per (head, side) and reset() it before another.
class QuantBlockParams {
 public:
  /// Fills `out` for rows [r0, r0 + rows) of q (d columns). Valid until the next
  /// prepare() or reset().
  void prepare(const QuantRows& q, size_t d, size_t r0, size_t rows, QuantSideBlock& out);
  void reset() { src_ = nullptr; }

 private:
  std::vector<float> zero_, scale_;
  std::vector<const float*> zero_rows_, scale_rows_;
  const QuantRows* src_ = nullptr;
  size_t first_ = 0, last_ = 0, per_row_ = 0;
  bool broadcast_ = false;
};

}  // namespace vc::cpu

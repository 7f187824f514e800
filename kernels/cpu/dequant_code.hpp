// Internal: one code and one dequantized value, element by element; the scalar
// path's formula, and the heads and tails of the SIMD paths' rows.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// The i-th `bits`-bit code (1..16 bits) of a densely packed, LSB-first buffer of
/// `codes_bytes` bytes; reads only the bytes the code occupies.
inline uint32_t dequant_code_at(const uint8_t* codes, size_t codes_bytes, size_t i, int bits) {
  const size_t bit = i * size_t(bits), byte = bit / 8, last = (bit + size_t(bits) - 1) / 8;
  uint32_t w = 0;
  for (size_t b = byte; b <= last && b < codes_bytes; ++b) w |= uint32_t(codes[b]) << (8 * (b - byte));
  return (w >> (bit % 8)) & ((1u << bits) - 1u);
}

/// zero + code * scale, the product rounded before the sum (the files that include
/// this are compiled with -ffp-contract=off, see kernels/CMakeLists.txt).
inline float dequant_value(float zero, float scale, float code) { return zero + code * scale; }

}  // namespace
}  // namespace vc::cpu

// Element types of weights and KV, and scalar conversions between them.
// Lowest layer: no dependency beyond the standard library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace vc {

/// Storage type of a tensor. Arithmetic is always fp32.
enum class DType : uint8_t { f32, f16, bf16 };

/// Bytes per element of `t`.
[[nodiscard]] constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

/// Safetensors spelling ("F32", "F16", "BF16").
[[nodiscard]] constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "F32" : (t == DType::f16 ? "F16" : "BF16");
}

/// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
[[nodiscard]] inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 -> bf16 with round-to-nearest-even (NaN stays NaN).
[[nodiscard]] inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE half -> f32 (exact, handles subnormals, inf, NaN).
[[nodiscard]] float f16_to_f32(uint16_t h);
/// f32 -> IEEE half with round-to-nearest-even.
[[nodiscard]] uint16_t f32_to_f16(float f);

/// Convert `n` elements of type `t` at `src` to f32.
void to_f32(DType t, const void* src, float* dst, size_t n);
/// Convert `n` f32 values to type `t` at `dst` (round to nearest even).
void from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace vc

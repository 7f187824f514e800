// Internal: unpacking eight `bits`-bit codes (1..16 bits, packed densely, LSB
// first) into a register of floats for the avx2 path, shared by dequantize_rows and
// the attention over quantized rows. Eight codes start on a byte boundary when
// their first index is a multiple of 8; each 128-bit half (four codes) loads the 16
// bytes from the byte holding its first code (up to 8 bits one load serves both), a
// byte shuffle puts each code's (at most 4) bytes in its 32-bit lane, and a per-lane
// shift and mask leave the code. Include only from *_avx2.cpp files.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

struct Unpack8 {
  __m256i shuffle, shift, mask;
  size_t hi_byte;  // where the upper four codes' bytes start
  size_t reach;    // bytes read from a group's first byte
};

Unpack8 make_unpack8(int bits) {
  const size_t b = size_t(bits);
  alignas(32) uint8_t shuffle[32];
  alignas(32) int32_t shift[8];
  // Up to 8 bits, eight codes span at most 8 bytes: both halves read the same 16.
  const size_t base[2] = {0, b <= 8 ? 0 : 4 * b / 8};
  for (size_t k = 0; k < 8; ++k) {
    const size_t half = k / 4, bit = k * b - 8 * base[half];
    for (size_t j = 0; j < 4; ++j) shuffle[k * 4 + j] = uint8_t(bit / 8 + j);
    shift[k] = int32_t(bit % 8);
  }
  Unpack8 u;
  u.shuffle = _mm256_load_si256(reinterpret_cast<const __m256i*>(shuffle));
  u.shift = _mm256_load_si256(reinterpret_cast<const __m256i*>(shift));
  u.mask = _mm256_set1_epi32(int32_t((1u << bits) - 1u));
  u.hi_byte = base[1];
  u.reach = base[1] + 16;
  return u;
}

// The eight codes whose bits start at byte p, as floats (Narrow: up to 8 bits, one
// 16-byte load broadcast to both halves).
template <bool Narrow>
inline __m256 codes8(__m256i shuffle, __m256i shift, __m256i mask, size_t hi_byte, const uint8_t* p) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i v;
  if constexpr (Narrow) {
    v = _mm256_broadcastsi128_si256(lo);
  } else {
    v = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + hi_byte)), lo);
  }
  v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, shuffle), shift), mask);
  return _mm256_cvtepi32_ps(v);
}

// The shuffles of every width, made once.
const Unpack8& unpack8(int bits) {
  static const auto all = [] {
    std::array<Unpack8, 17> t{};
    for (int b = 1; b <= 16; ++b) t[size_t(b)] = make_unpack8(b);
    return t;
  }();
  return all[size_t(bits)];
}

}  // namespace
}  // namespace vc::cpu

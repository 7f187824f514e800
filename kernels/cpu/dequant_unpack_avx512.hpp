// Internal: unpacking sixteen `bits`-bit codes (1..16 bits, packed densely, LSB
// first) into a register of floats for the avx512 path, shared by dequantize_rows
// and the attention over quantized rows. Sixteen codes start on a byte boundary
// when their first index is a multiple of 8. Up to 8 bits, all sixteen lie in the
// 16 bytes from there: one load broadcast to the four 128-bit lanes. Wider, each
// lane (four codes) loads the 16 bytes from the byte holding its first code. Then a
// byte shuffle puts each code's bytes (at most 4) in its 32-bit lane, and a per-lane
// shift and mask leave the code. Include only from *_avx512.cpp files, after
// <immintrin.h> (see dequant_avx512.cpp for the GCC 12 warning around it).
#pragma once
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

struct Unpack16 {
  __m512i shuffle, shift, mask;
  size_t lane_byte[4];  // where each lane's four codes' bytes start (all 0: narrow)
  size_t reach;         // bytes read from a group's first byte
  bool narrow;          // up to 8 bits: one 16-byte load serves every lane
};

Unpack16 make_unpack16(int bits) {
  const size_t b = size_t(bits);
  alignas(64) uint8_t shuffle[64];
  alignas(64) int32_t shift[16];
  Unpack16 u;
  u.narrow = b <= 8;
  for (size_t lane = 0; lane < 4; ++lane) u.lane_byte[lane] = u.narrow ? 0 : 4 * lane * b / 8;
  for (size_t k = 0; k < 16; ++k) {
    const size_t bit = k * b - 8 * u.lane_byte[k / 4];
    // Narrow: a code spans at most 2 bytes, the last of them byte 15 at most; the
    // other bytes of its lane are zeroed (index 0x80).
    const size_t span = u.narrow ? (bit % 8 + b + 7) / 8 : 4;
    for (size_t j = 0; j < 4; ++j) shuffle[k * 4 + j] = j < span ? uint8_t(bit / 8 + j) : uint8_t(0x80);
    shift[k] = int32_t(bit % 8);
  }
  u.shuffle = _mm512_load_si512(shuffle);
  u.shift = _mm512_load_si512(shift);
  u.mask = _mm512_set1_epi32(int32_t((1u << bits) - 1u));
  u.reach = u.lane_byte[3] + 16;  // narrow: 16
  return u;
}

// The sixteen codes of up to 8 bits whose bits start at byte p, as floats.
inline __m512 codes16_narrow(__m512i shuffle, __m512i shift, __m512i mask, const uint8_t* p) {
  const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v, shuffle), shift), mask));
}

// The sixteen codes whose bits start at byte p, as floats.
inline __m512 codes16(__m512i shuffle, __m512i shift, __m512i mask, const size_t (&lane_byte)[4],
                      const uint8_t* p) {
  auto load = [&](size_t lane) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + lane_byte[lane]));
  };
  __m512i v = _mm512_zextsi128_si512(load(0));
  v = _mm512_inserti32x4(v, load(1), 1);
  v = _mm512_inserti32x4(v, load(2), 2);
  v = _mm512_inserti32x4(v, load(3), 3);
  v = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v, shuffle), shift), mask);
  return _mm512_cvtepi32_ps(v);
}

// The shuffles of every width, made once.
const Unpack16& unpack16(int bits) {
  static const auto all = [] {
    std::array<Unpack16, 17> t{};
    for (int b = 1; b <= 16; ++b) t[size_t(b)] = make_unpack16(b);
    return t;
  }();
  return all[size_t(bits)];
}

}  // namespace
}  // namespace vc::cpu

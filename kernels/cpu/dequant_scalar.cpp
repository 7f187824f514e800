// dequantize_rows for the scalar path (baseline x86-64): the groups' fp16 zeros and
// scales are expanded to one float per column, codes are unpacked a chunk at a time
// into floats (byte tables for 1/2/4 bits, 8-code groups for 3/5/6/7 bits), then each
// value is zero + code * scale.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/dequant_code.hpp"
#include "kernels/cpu/dequant_paths.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {
namespace {

// The 8 / Bits codes of every byte value, as floats: unpacking a byte-aligned run is
// then one table row copied per byte.
template <int Bits>
struct ByteCodes {
  float v[256][8 / Bits];
  constexpr ByteCodes() : v{} {
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 0; k < 8 / Bits; ++k) v[b][k] = float((b >> (k * Bits)) & ((1u << Bits) - 1u));
  }
};

// Codes [i, i + count) of `Bits` (1..8) bits as floats.
template <int Bits>
void unpack_run(const uint8_t* codes, size_t codes_bytes, size_t i, size_t count, float* out) {
  constexpr uint32_t mask = (1u << Bits) - 1u;
  if constexpr (Bits < 8 && 8 % Bits == 0) {
    constexpr size_t per_byte = 8 / Bits;
    if ((i * Bits) % 8 == 0 && count % per_byte == 0) {
      static constexpr ByteCodes<Bits> table;
      const uint8_t* at = codes + i * Bits / 8;
      for (size_t j = 0; j < count / per_byte; ++j)
        std::memcpy(out + j * per_byte, table.v[at[j]], sizeof(table.v[0]));
      return;
    }
  }
  if constexpr (8 % Bits != 0) {
    // Eight codes fill exactly Bits bytes: from a code index divisible by 8, each
    // group of eight is one little-endian load and eight fixed shifts.
    if (i % 8 == 0) {
      const uint8_t* at = codes + i / 8 * Bits;
      size_t c = 0;
      for (; c + 8 <= count; c += 8, at += Bits) {
        uint64_t w = 0;
        for (int k = 0; k < Bits; ++k) w |= uint64_t(at[k]) << (8 * k);
        for (int k = 0; k < 8; ++k) out[c + size_t(k)] = float(uint32_t(w >> (k * Bits)) & mask);
      }
      i += c;
      out += c;
      count -= c;
    }
  }
  if constexpr (Bits == 8) {
    for (size_t c = 0; c < count; ++c) out[c] = float(codes[i + c]);
  } else {
    for (size_t c = 0; c < count; ++c) out[c] = float(dequant_code_at(codes, codes_bytes, i + c, Bits));
  }
}

void unpack_codes(const uint8_t* codes, size_t codes_bytes, size_t i, size_t count, int bits,
                  float* out) {
  switch (bits) {
    case 1: return unpack_run<1>(codes, codes_bytes, i, count, out);
    case 2: return unpack_run<2>(codes, codes_bytes, i, count, out);
    case 3: return unpack_run<3>(codes, codes_bytes, i, count, out);
    case 4: return unpack_run<4>(codes, codes_bytes, i, count, out);
    case 5: return unpack_run<5>(codes, codes_bytes, i, count, out);
    case 6: return unpack_run<6>(codes, codes_bytes, i, count, out);
    case 7: return unpack_run<7>(codes, codes_bytes, i, count, out);
    case 8: return unpack_run<8>(codes, codes_bytes, i, count, out);
    default:
      for (size_t c = 0; c < count; ++c) out[c] = float(dequant_code_at(codes, codes_bytes, i + c, bits));
  }
}

}  // namespace

void dequantize_rows_scalar(const uint8_t* codes, size_t codes_bytes, int bits, size_t first,
                            size_t rows, size_t d, const uint16_t* zero_f16,
                            const uint16_t* scale_f16, size_t group_cols, size_t params_row_stride,
                            float* out) {
  thread_local std::vector<float> params;  // per column: zeros, then scales
  params.resize(2 * d);
  float* const zero = params.data();
  float* const scale = zero + d;
  constexpr size_t kChunk = 64;  // a multiple of 8: chunks stay byte-aligned
  float cf[kChunk];
  for (size_t r = 0; r < rows; ++r) {
    if (r == 0 || params_row_stride != 0) {
      const uint16_t* zr = zero_f16 + r * params_row_stride;
      const uint16_t* sr = scale_f16 + r * params_row_stride;
      for (size_t c0 = 0, g = 0; c0 < d; c0 += group_cols, ++g) {
        const size_t end = c0 + group_cols < d ? c0 + group_cols : d;
        std::fill(zero + c0, zero + end, f16_to_f32(zr[g]));
        std::fill(scale + c0, scale + end, f16_to_f32(sr[g]));
      }
    }
    float* row = out + r * d;
    for (size_t c0 = 0; c0 < d; c0 += kChunk) {
      const size_t n = d - c0 < kChunk ? d - c0 : kChunk;
      unpack_codes(codes, codes_bytes, first + r * d + c0, n, bits, cf);
      for (size_t c = 0; c < n; ++c) row[c0 + c] = dequant_value(zero[c0 + c], scale[c0 + c], cf[c]);
    }
  }
}

void f16_to_f32_n_scalar(const uint16_t* h, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
}

}  // namespace vc::cpu

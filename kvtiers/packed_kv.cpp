// Packing and decoding of the compressed tier's held KV (see packed_kv.hpp).
#include "kvtiers/packed_kv.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressors/hadamard.hpp"

namespace vc {

namespace {

inline uint32_t code_at(const uint8_t* codes, size_t i, int bits) {
  const size_t bit = i * size_t(bits);
  if (8 % bits == 0)  // 1, 2, 4, 8 bits: a code never straddles a byte
    return uint32_t(codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
  uint32_t out = 0;
  for (int b = 0; b < bits; ++b) {
    const size_t at = bit + size_t(b);
    out |= uint32_t((codes[at / 8] >> (at % 8)) & 1u) << b;
  }
  return out;
}

}  // namespace


namespace {

// cos and sin of pos * inv_freq[i] for every position up to the largest asked, per
// thread (a model-level constant, like the cos/sin cache of GPU engines): decoding a
// KVQuant view re-applies RoPE to every kept key on every draft step, and computing
// sin/cos there made drafting ~7x slower. Same values as computing them directly.
const double* rope_row(const float* inv_freq, size_t h, size_t pos) {
  struct Cache {
    std::vector<float> inv;
    std::vector<double> cs;  // [rows][h][cos, sin]
    size_t rows = 0;
  };
  thread_local Cache c;
  if (c.inv.size() != h || !std::equal(c.inv.begin(), c.inv.end(), inv_freq)) {
    c.inv.assign(inv_freq, inv_freq + h);
    c.cs.clear();
    c.rows = 0;
  }
  if (pos >= c.rows) {
    const size_t rows = std::max({pos + 1, 2 * c.rows, size_t(1024)});
    c.cs.resize(rows * h * 2);
    for (size_t p = c.rows; p < rows; ++p)
      for (size_t i = 0; i < h; ++i) {
        const double a = double(p) * double(inv_freq[i]);
        c.cs[(p * h + i) * 2] = std::cos(a);
        c.cs[(p * h + i) * 2 + 1] = std::sin(a);
      }
    c.rows = rows;
  }
  return &c.cs[pos * h * 2];
}

}  // namespace

void rope_rotate_half(float* x, size_t d, const float* inv_freq, double pos, double sign) {
  const size_t h = d / 2;
  const double* cs = rope_row(inv_freq, h, size_t(pos));
  for (size_t i = 0; i < h; ++i) {
    const double c = cs[2 * i], s = sign * cs[2 * i + 1];  // sin(-a) = -sin(a)
    const double x1 = x[i], x2 = x[i + h];
    x[i] = float(x1 * c - x2 * s);
    x[i + h] = float(x2 * c + x1 * s);
  }
}

void pack_quantized(PackedSide& side, size_t n, size_t d, BlockShape block, int bits,
                    const std::vector<uint16_t>& codes, const std::vector<float>& scale_zero) {
  if (bits < 1 || bits > 16) throw Error("pack_quantized: bits must be in 1..16, got " + std::to_string(bits));
  side.bits = bits;
  side.quant_rows = n;
  side.block = {std::max<size_t>(block.rows, 1), std::max<size_t>(block.cols, 1)};
  side.codes.assign((n * d * size_t(bits) + 7) / 8, 0);
  for (size_t i = 0; i < n * d; ++i) {
    const size_t bit = i * size_t(bits);
    for (int b = 0; b < bits; ++b) {
      if ((codes[i] >> b) & 1u) side.codes[(bit + size_t(b)) / 8] |= uint8_t(1u << ((bit + size_t(b)) % 8));
    }
  }
  const size_t blocks = scale_zero.size() / 2;
  side.scale.resize(blocks);
  side.zero.resize(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    side.scale[b] = f32_to_f16(scale_zero[2 * b]);
    side.zero[b] = f32_to_f16(scale_zero[2 * b + 1]);
  }
}

void pack_bf16(PackedSide& side, const float* x, size_t count) {
  const size_t at = side.full.size();
  side.full.resize(at + count);
  for (size_t i = 0; i < count; ++i) side.full[at + i] = f32_to_bf16(x[i]);
}

void PackedSide::decode(float* out, size_t n, size_t d, const int32_t* positions,
                        const float* inv_freq) const {
  if (!raw.empty()) {
    std::memcpy(out, raw.data(), n * d * sizeof(float));
  } else {
    const size_t q = std::min(quant_rows, n);
    if (q > 0) {
      const size_t br = block.rows, bc = block.cols;
      size_t b = 0;
      for (size_t r0 = 0; r0 < q; r0 += br) {
        for (size_t c0 = 0; c0 < d; c0 += bc, ++b) {
          const float s = f16_to_f32(scale[b]), z = f16_to_f32(zero[b]);
          for (size_t r = r0; r < std::min(r0 + br, q); ++r) {
            for (size_t c = c0; c < std::min(c0 + bc, d); ++c) {
              const size_t i = r * d + c;
              out[i] = dequantize_code(z, s, float(code_at(codes.data(), i, bits)));
            }
          }
        }
      }
    }
    for (size_t i = 0; i < (n - q) * d; ++i) out[q * d + i] = bf16_to_f32(full[i]);
    for (size_t i = 0; i < outlier_index.size(); ++i)
      out[outlier_index[i]] = bf16_to_f32(outlier_value[i]);
  }
  switch (transform) {
    case PackedTransform::none:
      break;
    case PackedTransform::hadamard:
      for (size_t r = 0; r < n; ++r) hadamard_inplace(out + r * d, d);
      break;
    case PackedTransform::rope:
      for (size_t r = 0; r < n; ++r) rope_rotate_half(out + r * d, d, inv_freq, double(positions[r]), 1.0);
      break;
  }
}

namespace {

// Codes [i, i + count) of `bits` (a compile-time width) bits, as floats: the
// unpacking half of decode_rows, unrolled per width.
// The 8 / Bits codes of every byte value, as floats: unpacking a byte-aligned run
// is then one table row copied per byte (a shift, mask and convert per code was
// most of the time of drafting over a KIVI view).
template <int Bits>
struct ByteCodes {
  float v[256][8 / Bits];
  constexpr ByteCodes() : v{} {
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 0; k < 8 / Bits; ++k) v[b][k] = float((b >> (k * Bits)) & ((1u << Bits) - 1u));
  }
};

template <int Bits>
void unpack_run(const uint8_t* codes, size_t i, size_t count, float* out) {
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
  } else if constexpr (8 % Bits == 0) {
    for (size_t c = 0; c < count; ++c) {
      const size_t bit = (i + c) * Bits;
      out[c] = float(uint32_t(codes[bit / 8] >> (bit % 8)) & mask);
    }
  } else {
    for (size_t c = 0; c < count; ++c) {  // a code may straddle two bytes
      const size_t bit = (i + c) * Bits;
      const uint32_t two = uint32_t(codes[bit / 8]) |
                           (bit / 8 + 1 < (bit + Bits + 7) / 8 ? uint32_t(codes[bit / 8 + 1]) << 8 : 0u);
      out[c] = float((two >> (bit % 8)) & mask);
    }
  }
}

void unpack_codes(const uint8_t* codes, size_t i, size_t count, int bits, float* out) {
  switch (bits) {
    case 1: return unpack_run<1>(codes, i, count, out);
    case 2: return unpack_run<2>(codes, i, count, out);
    case 3: return unpack_run<3>(codes, i, count, out);
    case 4: return unpack_run<4>(codes, i, count, out);
    case 8: return unpack_run<8>(codes, i, count, out);
    default:
      for (size_t c = 0; c < count; ++c) out[c] = float(code_at(codes, i + c, bits));
  }
}

}  // namespace

void PackedSide::decode_rows(float* out, size_t r0, size_t r1, size_t n, size_t d,
                             const int32_t* positions, const float* inv_freq) const {
  r1 = std::min(r1, n);
  if (r0 >= r1) return;
  if (!raw.empty()) {
    std::memcpy(out, raw.data() + r0 * d, (r1 - r0) * d * sizeof(float));
  } else {
    const size_t q = std::min(quant_rows, n);
    const size_t br = block.rows, bc = block.cols, col_blocks = (d + bc - 1) / bc;
    // Per row group (the rows sharing one block row), each column's scale and zero
    // are expanded once; each row is then unpacked and dequantized as whole vectors.
    // KIVI's per-channel key groups (32 rows x 1 column) made the per-block loop
    // convert two fp16 values and dispatch once per element.
    thread_local std::vector<float> zs, ss, cf;
    zs.resize(d);
    ss.resize(d);
    cf.resize(d);
    const size_t q_end = std::min(r1, q);
    for (size_t r = r0; r < q_end;) {
      const size_t group_end = std::min((r / br + 1) * br, q_end);
      for (size_t cb = 0, c0 = 0; cb < col_blocks; ++cb, c0 += bc) {
        const size_t b = (r / br) * col_blocks + cb, end = std::min(c0 + bc, d);
        const float s = f16_to_f32(scale[b]), z = f16_to_f32(zero[b]);
        std::fill(ss.begin() + ptrdiff_t(c0), ss.begin() + ptrdiff_t(end), s);
        std::fill(zs.begin() + ptrdiff_t(c0), zs.begin() + ptrdiff_t(end), z);
      }
      for (; r < group_end; ++r) {
        float* row = out + (r - r0) * d;
        unpack_codes(codes.data(), r * d, d, bits, cf.data());
        for (size_t c = 0; c < d; ++c) row[c] = dequantize_code(zs[c], ss[c], cf[c]);
      }
    }
    for (size_t r = std::max(r0, q); r < r1; ++r)
      for (size_t c = 0; c < d; ++c) out[(r - r0) * d + c] = bf16_to_f32(full[(r - q) * d + c]);
    const auto first = std::lower_bound(outlier_index.begin(), outlier_index.end(), uint32_t(r0 * d));
    for (auto it = first; it != outlier_index.end() && *it < r1 * d; ++it)
      out[*it - r0 * d] = bf16_to_f32(outlier_value[size_t(it - outlier_index.begin())]);
  }
  switch (transform) {
    case PackedTransform::none:
      break;
    case PackedTransform::hadamard:
      for (size_t r = r0; r < r1; ++r) hadamard_inplace(out + (r - r0) * d, d);
      break;
    case PackedTransform::rope:
      for (size_t r = r0; r < r1; ++r)
        rope_rotate_half(out + (r - r0) * d, d, inv_freq, double(positions[r]), 1.0);
      break;
  }
}

size_t PackedSide::held_bytes() const {
  return (scale.size() + zero.size() + full.size() + outlier_value.size()) * 2 + codes.size() +
         outlier_index.size() * 4 + raw.size() * 4;
}

}  // namespace vc

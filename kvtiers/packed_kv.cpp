// Packing and decoding of the compressed tier's held KV (see packed_kv.hpp).
#include "kvtiers/packed_kv.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu/dequant.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kernels/cpu/row_transforms.hpp"

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

// RoPE of `rows` rows at `positions` (the cos/sin table grown once, to the largest):
// decoding a KVQuant view re-applies RoPE to its keys.
void rope_rows(float* x, size_t rows, size_t d, const float* inv_freq, const int32_t* positions) {
  if (rows == 0) return;
  const int32_t last = *std::max_element(positions, positions + rows);
  const float* table = cpu::rope_table(inv_freq, d / 2, size_t(last));
  for (size_t r = 0; r < rows; ++r) cpu::rope_row(x + r * d, d, table + size_t(positions[r]) * d, 1.f);
}

}  // namespace

void rope_rotate_half(float* x, size_t d, const float* inv_freq, size_t pos, float sign) {
  cpu::rope_row(x, d, cpu::rope_table(inv_freq, d / 2, pos) + pos * d, sign);
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
      cpu::hadamard_rows(out, n, d);
      break;
    case PackedTransform::rope:
      rope_rows(out, n, d, inv_freq, positions);
      break;
  }
}

void PackedSide::decode_rows(float* out, size_t r0, size_t r1, size_t n, size_t d,
                             const int32_t* positions, const float* inv_freq,
                             bool apply_transform) const {
  r1 = std::min(r1, n);
  if (r0 >= r1) return;
  if (!raw.empty()) {
    std::memcpy(out, raw.data() + r0 * d, (r1 - r0) * d * sizeof(float));
  } else {
    const size_t q = std::min(quant_rows, n);
    const size_t br = block.rows, bc = block.cols, col_blocks = (d + bc - 1) / bc;
    // The SIMD kernel of the active path unpacks and dequantizes whole rows
    // (dequantize_code's formula, unfused): one call per row group (the rows sharing
    // one block row), or one for all the rows when each row has its own groups.
    const size_t q_end = std::min(r1, q);
    if (br == 1 && r0 < q_end) {
      cpu::dequantize_rows(codes.data(), codes.size(), bits, r0 * d, q_end - r0, d,
                           zero.data() + r0 * col_blocks, scale.data() + r0 * col_blocks, bc,
                           col_blocks, out);
    } else {
      for (size_t r = r0; r < q_end;) {
        const size_t group_end = std::min((r / br + 1) * br, q_end), b = (r / br) * col_blocks;
        cpu::dequantize_rows(codes.data(), codes.size(), bits, r * d, group_end - r, d,
                             zero.data() + b, scale.data() + b, bc, 0, out + (r - r0) * d);
        r = group_end;
      }
    }
    for (size_t r = std::max(r0, q); r < r1; ++r)
      for (size_t c = 0; c < d; ++c) out[(r - r0) * d + c] = bf16_to_f32(full[(r - q) * d + c]);
    const auto first = std::lower_bound(outlier_index.begin(), outlier_index.end(), uint32_t(r0 * d));
    for (auto it = first; it != outlier_index.end() && *it < r1 * d; ++it)
      out[*it - r0 * d] = bf16_to_f32(outlier_value[size_t(it - outlier_index.begin())]);
  }
  switch (apply_transform ? transform : PackedTransform::none) {
    case PackedTransform::none:
      break;
    case PackedTransform::hadamard:
      cpu::hadamard_rows(out, r1 - r0, d);
      break;
    case PackedTransform::rope:
      rope_rows(out, r1 - r0, d, inv_freq, positions + r0);
      break;
  }
}

std::optional<cpu::QuantRows> PackedSide::quant_rows_view(size_t n, bool rotated,
                                                          const int32_t* positions,
                                                          const float* inv_freq) const {
  const size_t q = std::min(quant_rows, n);
  const bool roped = transform == PackedTransform::rope && positions != nullptr && inv_freq != nullptr;
  const bool plain = transform == PackedTransform::none || roped ||
                     (rotated && transform == PackedTransform::hadamard);
  if (!raw.empty() || !plain || q == 0 || bits < 1 || bits > 16) return std::nullopt;
  cpu::QuantRows r;
  r.codes = codes.data();
  r.codes_bytes = codes.size();
  r.bits = bits;
  r.rows = q;
  r.block_rows = block.rows;
  r.block_cols = block.cols;
  r.zero = zero.data();
  r.scale = scale.data();
  r.outliers = outlier_index.data();
  r.n_outliers = outlier_index.size();
  r.outlier_values = outlier_value.data();
  if (roped) {
    r.rope_inv_freq = inv_freq;
    r.rope_positions = positions;
  }
  return r;
}

size_t PackedSide::held_bytes() const {
  return (scale.size() + zero.size() + full.size() + outlier_value.size()) * 2 + codes.size() +
         outlier_index.size() * 4 + raw.size() * 4;
}

}  // namespace vc

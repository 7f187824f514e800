// A compressed view's packed sides (PackedSide: codes, fp16 scales and zeros, bf16
// rows, outliers) gathered into one host buffer for one copy to the device, and the
// drafter's kernel descriptor (QuantPrefixSide) of each once it is there.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/attention_mixed.cuh"
#include "kvtiers/packed_kv.hpp"

namespace vc::cuda_backend {

/// Where one packed side's arrays (PackedSide) sit in a pass's staging buffer.
struct StagedSide {
  const PackedSide* side = nullptr;
  size_t codes = 0, zero = 0, scale = 0, full = 0, outliers = 0, values = 0;
};

/// Appends `bytes` at a 16-byte boundary; returns where they start.
inline size_t put(std::vector<std::byte>& st, const void* p, size_t bytes) {
  const size_t at = (st.size() + 15) / 16 * 16;
  st.resize(at + bytes);
  if (bytes > 0) std::memcpy(st.data() + at, p, bytes);
  return at;
}

inline StagedSide stage_side(std::vector<std::byte>& st, const PackedSide& s) {
  StagedSide o;
  o.side = &s;
  o.codes = put(st, s.codes.data(), s.codes.size());
  o.zero = put(st, s.zero.data(), s.zero.size() * sizeof(uint16_t));
  o.scale = put(st, s.scale.data(), s.scale.size() * sizeof(uint16_t));
  o.full = put(st, s.full.data(), s.full.size() * sizeof(uint16_t));
  o.outliers = put(st, s.outlier_index.data(), s.outlier_index.size() * sizeof(uint32_t));
  o.values = put(st, s.outlier_value.data(), s.outlier_value.size() * sizeof(uint16_t));
  return o;
}

/// The kernel's descriptor of a staged side of n rows, its arrays copied to `base`.
/// Codes are never null (a side without quantized rows has rows = 0): that marks the
/// (row, head) as packed for the kernel.
inline cuda::QuantPrefixSide describe(const StagedSide& o, size_t n, const std::byte* base,
                               const int32_t* positions, const float* rope_table) {
  const PackedSide& s = *o.side;
  cuda::QuantPrefixSide d;
  d.codes = reinterpret_cast<const uint8_t*>(base + o.codes);
  d.codes_bytes = s.codes.size();
  d.bits = s.bits;
  d.rows = std::min(s.quant_rows, n);
  d.block_rows = std::max<size_t>(s.block.rows, 1), d.block_cols = std::max<size_t>(s.block.cols, 1);
  d.zero = reinterpret_cast<const uint16_t*>(base + o.zero);
  d.scale = reinterpret_cast<const uint16_t*>(base + o.scale);
  d.full = reinterpret_cast<const uint16_t*>(base + o.full);
  d.outliers = reinterpret_cast<const uint32_t*>(base + o.outliers);
  d.outlier_values = reinterpret_cast<const uint16_t*>(base + o.values);
  d.n_outliers = s.outlier_index.size();
  if (s.transform == PackedTransform::rope) d.positions = positions, d.rope_table = rope_table;
  d.hadamard = s.transform == PackedTransform::hadamard;
  return d;
}


}  // namespace vc::cuda_backend

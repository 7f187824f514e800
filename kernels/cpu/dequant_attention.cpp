// The path-independent half of attention over quantized rows (dequant_attention.hpp):
// which blocks of rows qualify, their fp32 zeros and scales, and
// AttentionRowState::add_quantized, which runs the active SIMD path's kernel.
#include "kernels/cpu/dequant_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/cpu/row_transforms.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

bool quant_rows_plain(const QuantRows& q, size_t d, size_t r0, size_t r1) {
  if (q.codes == nullptr || r1 > q.rows || r0 >= r1) return false;
  const uint32_t* end = q.outliers + q.n_outliers;
  const uint32_t* first = std::lower_bound(q.outliers, end, uint32_t(r0 * d));
  return first == end || size_t(*first) >= r1 * d;
}

bool quant_rows_readable(const QuantRows& q, size_t d, size_t r0, size_t r1) {
  if (q.codes == nullptr || r1 > q.rows || r0 >= r1) return false;
  if (q.rope_inv_freq != nullptr && (d % 32 != 0 || q.rope_positions == nullptr)) return false;
  return q.outlier_values != nullptr || quant_rows_plain(q, d, r0, r1);
}


void QuantBlockParams::prepare(const QuantRows& q, size_t d, size_t r0, size_t rows,
                               QuantSideBlock& out) {
  const size_t br = std::max<size_t>(q.block_rows, 1), bc = std::max<size_t>(q.block_cols, 1);
  const size_t col_blocks = (d + bc - 1) / bc;
  const size_t p_first = r0 / br, p_last = (r0 + rows - 1) / br;
  // Whole groups per vector of every path (16 lanes at most): one value per group.
  const bool broadcast = bc % 16 == 0 || bc >= d;
  if (src_ != &q || p_first != first_ || p_last != last_) {
    const size_t dp = (d + 15) / 16 * 16;
    per_row_ = broadcast ? col_blocks : dp;
    broadcast_ = broadcast;
    const size_t n = (p_last - p_first + 1) * per_row_;
    zero_.assign(n, 0.f);
    scale_.assign(n, 0.f);
    const uint16_t* zh = q.zero + p_first * col_blocks;
    const uint16_t* sh = q.scale + p_first * col_blocks;
    if (broadcast) {  // one value per group: the group rows are contiguous
      f16_to_f32_n(zh, n, zero_.data());
      f16_to_f32_n(sh, n, scale_.data());
    } else if (bc == 1) {  // one value per column: a row at a time (padded)
      for (size_t p = 0; p <= p_last - p_first; ++p) {
        f16_to_f32_n(zh + p * col_blocks, d, zero_.data() + p * per_row_);
        f16_to_f32_n(sh + p * col_blocks, d, scale_.data() + p * per_row_);
      }
    } else {  // a few columns a group: expanded to one value per column
      for (size_t p = 0; p <= p_last - p_first; ++p) {
        float* z = zero_.data() + p * per_row_;
        float* s = scale_.data() + p * per_row_;
        for (size_t c0 = 0, g = 0; c0 < d; c0 += bc, ++g) {
          const float zg = f16_to_f32(zh[p * col_blocks + g]), sg = f16_to_f32(sh[p * col_blocks + g]);
          for (size_t c = c0; c < std::min(c0 + bc, d); ++c) {
            z[c] = zg;
            s[c] = sg;
          }
        }
      }
    }
    src_ = &q;
    first_ = p_first;
    last_ = p_last;
  }
  zero_rows_.resize(rows);
  scale_rows_.resize(rows);
  // Row r0 + t's group row, counted up without a division per row (locals: the
  // pointer stores could otherwise alias the vectors' own).
  const float* z = zero_.data();
  const float* s = scale_.data();
  const float** zr = zero_rows_.data();
  const float** sr = scale_rows_.data();
  const size_t per_row = per_row_;
  size_t in_group = r0 - p_first * br;
  for (size_t t = 0; t < rows; ++t, ++in_group) {
    if (in_group == br) {
      in_group = 0;
      z += per_row;
      s += per_row;
    }
    zr[t] = z;
    sr[t] = s;
  }
  out = QuantSideBlock{q.codes,           q.codes_bytes,      q.bits,     r0 * d,
                       zero_rows_.data(), scale_rows_.data(), broadcast_, bc};
  if (q.rope_inv_freq != nullptr) {  // each row's cos and sin at its position
    if (d % 32 != 0 || q.rope_positions == nullptr)
      throw Error("QuantBlockParams::prepare: RoPE'd rows need positions and a head_dim that "
                  "is a multiple of 32, got " + std::to_string(d));
    const int32_t* pos = q.rope_positions + r0;
    const int32_t last = *std::max_element(pos, pos + rows);
    if (*std::min_element(pos, pos + rows) < 0)
      throw Error("QuantBlockParams::prepare: a negative position among rows [" +
                  std::to_string(r0) + ", " + std::to_string(r0 + rows) + ")");
    const float* table = rope_table(q.rope_inv_freq, d / 2, size_t(last));
    rope_rows_.resize(rows);
    for (size_t t = 0; t < rows; ++t) rope_rows_[t] = table + size_t(pos[t]) * d;
    out.rope = rope_rows_.data();
  }
  // The block's outliers: a bit per column and their fp32 values, rows [r0, r0 + rows).
  if (q.n_outliers == 0) return;
  const uint32_t* end = q.outliers + q.n_outliers;
  const uint32_t* it = std::lower_bound(q.outliers, end, uint32_t(r0 * d));
  if (it == end || size_t(*it) >= (r0 + rows) * d) return;
  if (q.outlier_values == nullptr)
    throw Error("QuantBlockParams::prepare: rows [" + std::to_string(r0) + ", " +
                std::to_string(r0 + rows) + ") hold outliers without their values");
  const size_t words = (d + 63) / 64, stride = (d + 15) / 16 * 16;
  patch_mask_.assign(rows * words, 0);
  if (patch_.size() < rows * stride) patch_.resize(rows * stride);
  for (; it != end && size_t(*it) < (r0 + rows) * d; ++it) {
    const size_t t = size_t(*it) / d - r0, c = size_t(*it) % d;
    patch_mask_[t * words + c / 64] |= uint64_t(1) << (c % 64);
    patch_[t * stride + c] = bf16_to_f32(q.outlier_values[it - q.outliers]);
  }
  out.patch_mask = patch_mask_.data();
  out.patch = patch_.data();
  out.patch_words = words;
  out.patch_stride = stride;
}

namespace {

// The active path's kernels: both sides from the codes, and V alone.
struct DequantAttnKernels {
  DequantAttnFn kv;
  DequantAttnVFn v;
};

DequantAttnKernels dequant_attention_kernels(SimdPath p) {
  switch (p) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return {dequant_attention_block_avx512, dequant_attention_block_v_avx512};
    case SimdPath::avx2:
      return {dequant_attention_block_avx2, dequant_attention_block_v_avx2};
    case SimdPath::scalar:
      break;
  }
  return {dequant_attention_block_scalar, dequant_attention_block_v_scalar};
}

// The errors the checks below raise, out of the per-block path.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_side(const char* fn, const QuantSideBlock& s,
                                                        const char* which) {
  const std::string at = std::string("AttentionRowState::") + fn + ": ";
  if (s.codes == nullptr || s.zero == nullptr || s.scale == nullptr)
    throw Error(at + "the " + which + " side has no codes, zeros or scales");
  if (s.bits < 1 || s.bits > 16)
    throw Error(at + which + " bits must be in 1..16, got " + std::to_string(s.bits));
  throw Error(at + which + " group_cols is 0");
}

[[noreturn, gnu::cold, gnu::noinline]] void refuse_codes(const char* fn, const QuantSideBlock& s,
                                                         size_t c, size_t d) {
  throw Error(std::string("AttentionRowState::") + fn + ": codes [" + std::to_string(s.first) +
              ", " + std::to_string(s.first + c * d) + ") run past the " +
              std::to_string(s.codes_bytes) + "-byte code buffer");
}

// A side's pointers and shape are usable, and the codes of its c rows of d from
// s.first lie inside the buffer.
inline void check_side(const char* fn, const QuantSideBlock& s, const char* which, size_t c,
                       size_t d) {
  if (s.codes == nullptr || s.zero == nullptr || s.scale == nullptr || s.bits < 1 ||
      s.bits > 16 || s.group_cols == 0) [[unlikely]]
    refuse_side(fn, s, which);
  if (((s.first + c * d) * size_t(s.bits) + 7) / 8 > s.codes_bytes) [[unlikely]]
    refuse_codes(fn, s, c, d);
}

// Scores of one block for the kernel's widest head pass.
float* block_scratch(size_t bt) {
  thread_local std::vector<float> sc;
  const size_t need = kAttentionMaxHeadsPerPass * ((bt + 15) / 16 * 16);
  if (sc.size() < need) sc.resize(need);
  return sc.data();
}

}  // namespace

size_t AttentionRowState::next_quantized_block(const char* fn) const {
  if (kv_heads_ != 1) [[unlikely]]
    throw Error(std::string("AttentionRowState::") + fn +
                ": needs a state of one KV head, this one has " + std::to_string(kv_heads_));
  if (next_block_ >= n_blocks_) [[unlikely]]
    throw Error(std::string("AttentionRowState::") + fn + ": all " + std::to_string(n_blocks_) +
                " blocks were already added");
  const size_t bt = block_tokens_, j = next_block_;
  return (j + 1) * bt <= n_ctx_ ? bt : n_ctx_ - j * bt;  // valid rows
}

void AttentionRowState::add_quantized(const QuantSideBlock& k, const QuantSideBlock& v) {
  const char* fn = "add_quantized";
  const size_t c = next_quantized_block(fn);
  check_side(fn, k, "K", c, head_dim_);
  check_side(fn, v, "V", c, head_dim_);
  if ((k.rope != nullptr && head_dim_ % 32 != 0) || v.rope != nullptr) [[unlikely]]
    throw Error("AttentionRowState::add_quantized: RoPE is applied to K rows only, with a "
                "head_dim that is a multiple of 32 (got " + std::to_string(head_dim_) + ")");
  const DequantAttnFn kernel = dequant_attention_kernels(active_simd_path()).kv;
  kernel(n_heads_, head_dim_, block_tokens_, c, k, v, state_.data(), block_scratch(block_tokens_));
  ++next_block_;
}

void AttentionRowState::add_quantized_v(const float* k_rows, const QuantSideBlock& v) {
  const char* fn = "add_quantized_v";
  const size_t c = next_quantized_block(fn);
  if (k_rows == nullptr) throw Error("AttentionRowState::add_quantized_v: no K rows");
  check_side(fn, v, "V", c, head_dim_);
  if (v.rope != nullptr)
    throw Error("AttentionRowState::add_quantized_v: RoPE is applied to K rows only");
  const DequantAttnVFn kernel = dequant_attention_kernels(active_simd_path()).v;
  kernel(n_heads_, head_dim_, block_tokens_, c, k_rows, v, state_.data(),
         block_scratch(block_tokens_));
  ++next_block_;
}

}  // namespace vc::cpu

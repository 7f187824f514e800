// The path-independent half of attention over quantized rows (dequant_attention.hpp):
// which blocks of rows qualify, their fp32 zeros and scales, and
// AttentionRowState::add_quantized, which runs the active SIMD path's kernel.
#include "kernels/cpu/dequant_attention.hpp"

#include <algorithm>
#include <string>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/dequant_attention_paths.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

bool quant_rows_plain(const QuantRows& q, size_t d, size_t r0, size_t r1) {
  if (q.codes == nullptr || r1 > q.rows || r0 >= r1) return false;
  const uint32_t* end = q.outliers + q.n_outliers;
  const uint32_t* first = std::lower_bound(q.outliers, end, uint32_t(r0 * d));
  return first == end || size_t(*first) >= r1 * d;
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
}

namespace {

DequantAttnFn dequant_attention_fn(SimdPath p) {
  switch (p) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return dequant_attention_block_avx512;
    case SimdPath::avx2:
      return dequant_attention_block_avx2;
    case SimdPath::scalar:
      break;
  }
  return dequant_attention_block_scalar;
}

void check_side(const QuantSideBlock& s, const char* which) {
  if (s.codes == nullptr || s.zero == nullptr || s.scale == nullptr)
    throw Error(std::string("AttentionRowState::add_quantized: the ") + which +
                " side has no codes, zeros or scales");
  if (s.bits < 1 || s.bits > 16)
    throw Error(std::string("AttentionRowState::add_quantized: ") + which +
                " bits must be in 1..16, got " + std::to_string(s.bits));
  if (s.group_cols == 0)
    throw Error(std::string("AttentionRowState::add_quantized: ") + which + " group_cols is 0");
}

}  // namespace

void AttentionRowState::add_quantized(const QuantSideBlock& k, const QuantSideBlock& v) {
  if (kv_heads_ != 1)
    throw Error("AttentionRowState::add_quantized: needs a state of one KV head, this one has " +
                std::to_string(kv_heads_));
  if (next_block_ >= n_blocks_)
    throw Error("AttentionRowState::add_quantized: all " + std::to_string(n_blocks_) +
                " blocks were already added");
  check_side(k, "K");
  check_side(v, "V");
  const size_t bt = block_tokens_, j = next_block_;
  const size_t c = (j + 1) * bt <= n_ctx_ ? bt : n_ctx_ - j * bt;
  for (const QuantSideBlock* s : {&k, &v}) {
    const size_t end_bits = (s->first + c * head_dim_) * size_t(s->bits);
    if ((end_bits + 7) / 8 > s->codes_bytes)
      throw Error("AttentionRowState::add_quantized: codes [" + std::to_string(s->first) + ", " +
                  std::to_string(s->first + c * head_dim_) + ") run past the " +
                  std::to_string(s->codes_bytes) + "-byte code buffer");
  }
  thread_local std::vector<float> sc;
  const size_t need = kAttentionMaxHeadsPerPass * ((bt + 15) / 16 * 16);
  if (sc.size() < need) sc.resize(need);
  dequant_attention_fn(active_simd_path())(n_heads_, head_dim_, bt, c, k, v, state_.data(),
                                           sc.data());
  ++next_block_;
}

}  // namespace vc::cpu

// Attention of one query row over a compressed prefix (explicit rows per KV head,
// as the compressed tier holds them) followed by a paged tail of recent positions.
// This is the drafter's attention: it need not be batch invariant (drafts are
// verified), only fast and correct. It runs the same SIMD kernels as attention_row.
#pragma once
#include <cstddef>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dequant_attention.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {

/// Writes rows [r0, r1) of a packed prefix as fp32 into k and v ([r1 - r0,
/// head_dim] each; v null: the K rows only); ctx is DenseKvHead::ctx.
using PrefixRowsFn = void (*)(const void* ctx, size_t r0, size_t r1, float* k, float* v);

/// One KV head's explicit rows: k, v: [n, head_dim] in `dtype` (f32 or bf16),
/// read in place. With `rows` set, k and v are unused: the rows are packed
/// (quantized, transformed) and rows(ctx, ...) decodes one block of them at a time
/// into a per-thread fp32 tile right before it is attended to. With quant_k and/or
/// quant_v set as well, describing a side's rows as they are held (their values,
/// as rows() writes them, being exactly zero + code * scale, or the outlier's
/// value, wherever quant_rows_readable() holds), a block whose V rows are all
/// readable is attended with V straight from the codes (dequant_attention.hpp), and
/// its K rows too when they are, else decoded by rows(ctx, r0, r1, k, nullptr):
/// the same bits, without writing the side out.
struct DenseKvHead {
  const void* k = nullptr;
  const void* v = nullptr;
  size_t n = 0;
  DType dtype = DType::f32;
  PrefixRowsFn rows = nullptr;
  const void* ctx = nullptr;
  const QuantRows* quant_k = nullptr;
  const QuantRows* quant_v = nullptr;
  /// The prefix's K and V rows (in place, from rows() and from the codes) are
  /// Hadamard-rotated (hadamard_rows: RotateKV stores them so): the head's queries
  /// are rotated into their basis, the tail's rows too, and the output back, as
  /// H is orthonormal and its own inverse. Not the bits of attending to rows rotated
  /// back one by one; far fewer rotations (a row's query heads and the tail's rows).
  bool hadamard = false;
};

/// Rows of the prefix read in place per block; the rest (a partial block and the
/// tail) is copied to fp32 scratch. Each block pays a fixed cost (its softmax, the
/// merge into the running state, a quantized block's zeros and scales): 64 rows
/// attend a 4K KIVI view of the 1B shape about 1.4x faster than 16 (`bench
/// attention`), 128 no faster than 64.
inline constexpr size_t kMixedBlockRows = 64;

/// out[h] = softmax over (prefix[g] rows, then tail positions [tail_begin, n_ctx))
/// of scale * q[h]·k, applied to the matching v; g = h / (n_heads / kv_heads).
/// prefix: [tail.kv_heads] entries. q, out: [n_heads, head_dim]. With a `pool`, the
/// KV heads are split across its threads when the context is long enough to pay for
/// the hand-off (a lone drafting row); the bits are the same either way.
void attention_row_mixed(const float* q, size_t n_heads, const DenseKvHead* prefix,
                         const PagedKv& tail, size_t tail_begin, size_t n_ctx, float scale,
                         float* out, ThreadPool* pool = nullptr);

}  // namespace vc::cpu

// Mixed attention as blocked online softmax: each KV head's prefix rows form a
// sequence of kMixedBlockRows-row blocks read in place (bf16 or fp32); the last
// partial block and the paged tail are gathered as fp32 into per-thread scratch
// and appended as further blocks. A packed (quantized) prefix is decoded one block
// at a time into a per-thread fp32 tile right before that block is attended to, so
// no step materialises the whole prefix; a block of plain quantized rows is
// attended straight from its codes (dequant_attention.hpp: the same bits, or up to
// float rounding for KIVI's layout on the vector paths).
// AttentionRowState merges the blocks in order.
#include "kernels/cpu/attention_mixed.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/row_transforms.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

namespace {

// Reads tail position `pos` of KV head g as fp32 into k, v.
void load_tail(const PagedKv& kv, size_t g, size_t pos, float* k, float* v) {
  const size_t bt = kv.block_tokens, D = kv.head_dim, esz = dtype_size(kv.dtype);
  const size_t block = size_t(kv.block_table[pos / bt]);
  const size_t off = (((block * kv.kv_heads + g) * bt) + pos % bt) * D * esz;
  to_f32(kv.dtype, static_cast<const char*>(kv.k) + off, k, D);
  to_f32(kv.dtype, static_cast<const char*>(kv.v) + off, v, D);
}

// KV heads [g0, g1) of attention_row_mixed (arguments checked), with this thread's
// scratch.
void attend_heads(const float* q, size_t n_heads, const DenseKvHead* prefix, const PagedKv& tail,
                  size_t tail_begin, size_t n_ctx, float scale, float* out, size_t g0, size_t g1) {
  const size_t D = tail.head_dim, G = tail.kv_heads, B = kMixedBlockRows;
  const size_t group = n_heads / G;
  const size_t n_tail = n_ctx > tail_begin ? n_ctx - tail_begin : 0;
  thread_local std::vector<float> sk, sv, tk, tv, qrot;
  thread_local std::vector<int32_t> table_in_place, table_scratch;
  thread_local AttentionRowState state;
  thread_local QuantBlockParams qk, qv;
  for (size_t g = g0; g < g1; ++g) {
    const DenseKvHead& p = prefix[g];
    const size_t n = p.n + n_tail;
    const size_t whole = p.n / B;                 // prefix blocks read in place
    const size_t rest = n - whole * B;            // rows gathered into scratch
    const size_t blocks = (n + B - 1) / B;
    sk.resize(std::max<size_t>(1, (rest + B - 1) / B) * B * D);
    sv.resize(sk.size());
    const size_t esz = dtype_size(p.dtype);
    if (p.rows != nullptr) {
      if (whole * B < p.n) p.rows(p.ctx, whole * B, p.n, sk.data(), sv.data());
    } else {
      for (size_t i = whole * B; i < p.n; ++i) {
        const size_t at = (i - whole * B) * D;
        to_f32(p.dtype, static_cast<const char*>(p.k) + i * D * esz, &sk[at], D);
        to_f32(p.dtype, static_cast<const char*>(p.v) + i * D * esz, &sv[at], D);
      }
    }
    for (size_t t = 0; t < n_tail; ++t) {
      const size_t at = (p.n - whole * B + t) * D;
      load_tail(tail, g, tail_begin + t, &sk[at], &sv[at]);
    }
    const float* qg = q + g * group * D;
    if (p.hadamard && n_tail > 0) {  // the tail into the prefix's basis
      hadamard_rows(&sk[(p.n - whole * B) * D], n_tail, D);
      hadamard_rows(&sv[(p.n - whole * B) * D], n_tail, D);
    }
    if (p.hadamard) {  // and the queries: (H q) . (H k) = q . k
      qrot.assign(qg, qg + group * D);
      hadamard_rows(qrot.data(), group, D);
      qg = qrot.data();
    }
    table_in_place.resize(blocks);
    table_scratch.resize(blocks);
    for (size_t j = 0; j < blocks; ++j) {
      table_in_place[j] = p.rows != nullptr ? 0 : int32_t(j);  // packed: the tile
      table_scratch[j] = int32_t(j < whole ? 0 : j - whole);
    }
    PagedKv scratch{sk.data(), sv.data(), DType::f32, B, 1, D, table_scratch.data()};
    state.begin(qg, group, scratch, n, scale);
    if (p.rows != nullptr) {
      // Packed rows: each whole block is decoded into the fp32 tile, then attended.
      tk.resize(B * D);
      tv.resize(B * D);
      const PagedKv tile{tk.data(), tv.data(), DType::f32, B, 1, D, table_in_place.data()};
      // A block whose V rows are readable from the codes is attended from them,
      // with K from the codes too when its rows are, else decoded into the tile
      // (KVQuant's RoPE'd keys); any other block is decoded whole.
      qk.reset();
      qv.reset();
      // Sides readable over every whole block (the usual case) skip the per-block test.
      const bool v_all = p.quant_v != nullptr && whole > 0 && quant_rows_readable(*p.quant_v, D, 0, whole * B);
      const bool k_all = p.quant_k != nullptr && whole > 0 && quant_rows_readable(*p.quant_k, D, 0, whole * B);
      for (size_t j = 0; j < whole; ++j) {
        const size_t r0 = j * B, r1 = r0 + B;
        if (v_all || (p.quant_v != nullptr && quant_rows_readable(*p.quant_v, D, r0, r1))) {
          QuantSideBlock vb;
          qv.prepare(*p.quant_v, D, r0, B, vb);
          if (k_all || (p.quant_k != nullptr && quant_rows_readable(*p.quant_k, D, r0, r1))) {
            QuantSideBlock kb;
            qk.prepare(*p.quant_k, D, r0, B, kb);
            state.add_quantized(kb, vb);
          } else {
            p.rows(p.ctx, r0, r1, tk.data(), nullptr);
            state.add_quantized_v(tk.data(), vb);
          }
        } else {
          p.rows(p.ctx, r0, r1, tk.data(), tv.data());
          state.add(tile, j, j + 1);
        }
      }
    } else if (whole > 0) {
      const PagedKv in_place{p.k, p.v, p.dtype, B, 1, D, table_in_place.data()};
      state.add(in_place, 0, whole);
    }
    state.add(scratch, whole, blocks);
    state.finish(out + g * group * D);
    // The weighted V came out in the rotated basis: H (sum p H v) = sum p v.
    if (p.hadamard) hadamard_rows(out + g * group * D, group, D);
  }
}

}  // namespace

void attention_row_mixed(const float* q, size_t n_heads, const DenseKvHead* prefix,
                         const PagedKv& tail, size_t tail_begin, size_t n_ctx, float scale,
                         float* out, ThreadPool* pool) {
  const size_t G = tail.kv_heads;
  if (G == 0 || n_heads % G != 0)
    throw Error("attention_row_mixed: query heads must be a multiple of KV heads");
  const size_t n_tail = n_ctx > tail_begin ? n_ctx - tail_begin : 0;
  size_t most = 0;  // the longest head's positions
  for (size_t g = 0; g < G; ++g) {
    const DenseKvHead& p = prefix[g];
    if (p.rows == nullptr && p.dtype != DType::f32 && p.dtype != DType::bf16)
      throw Error("attention_row_mixed: prefix rows must be f32 or bf16");
    if (p.n + n_tail == 0) throw Error("attention_row_mixed: nothing to attend to");
    most = std::max(most, p.n + n_tail);
  }
  if (pool == nullptr || pool->threads() == 1 || G == 1 || most < kMinParallelPositions) {
    attend_heads(q, n_heads, prefix, tail, tail_begin, n_ctx, scale, out, 0, G);
    return;
  }
  // KV heads are independent: each thread attends whole heads with its own scratch,
  // so the bits do not depend on the split.
  pool->parallel_for(G, 1, [&](size_t g0, size_t g1) {
    attend_heads(q, n_heads, prefix, tail, tail_begin, n_ctx, scale, out, g0, g1);
  });
}

}  // namespace vc::cpu

// Internal: attention of one row's query heads over one block of K/V rows that are
// quantized codes, dequantized in registers, generic over a SIMD traits type and a
// code unpacker (dequant_attention_{scalar,avx2,avx512}.cpp). The attention
// arithmetic is attention_kernel.hpp's attend_block_rows; only where its K and V
// vectors come from differs: QuantRowsSrc::at unpacks W codes and computes
// zero + code * scale, the multiply and the add rounded separately (the files that
// include this are compiled with -ffp-contract=off, and the SIMD traits reach an
// addition from a product only through an explicit fmadd), so each vector equals
// the one dequantize_rows writes and the bits equal attending to the written rows.
// KIVI's layout on paths with a vector unpacker takes factored_attention_kernel.hpp
// instead (up to float rounding).
// Outliers are blended in over their lanes (CodeMode::patched), and KVQuant's
// pre-RoPE keys are RoPE'd a block at a time into a small fp32 tile (rope_rows_tile,
// cpu::rope_row's arithmetic), the values PackedSide::decode_rows writes.
//
// An unpacker U, built from a QuantSideBlock, gives:
//   static bool block_fast(const QuantSideBlock& s, size_t D, size_t c)
//                             -- every vector of the block's c rows unpacks whole
//                                (starts on a multiple of 8 codes, no row tail,
//                                loads inside the code buffer)
//   V unpack(size_t i) const  -- the W codes from code index i as floats
// Blocks that are not fast read each code on its own (dequant_code_at).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention_kernel.hpp"
#include "kernels/cpu/dequant_attention.hpp"
#include "kernels/cpu/dequant_code.hpp"
#include "kernels/cpu/factored_attention_kernel.hpp"

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// What a side's vectors need besides zero + code * scale: nothing (plain), or its
/// outliers blended in (patched: QuantSideBlock::patch_mask, when set).
enum class CodeMode { plain, patched };

/// Rows of one side as codes: row t's W lanes from column d (len valid, the rest 0).
/// kFast: the block's vectors all unpack whole (U::block_fast).
template <class T, class U, bool kBroadcast, bool kFast, CodeMode kMode>
struct QuantRowsSrc {
  U u;
  const QuantSideBlock* s;
  size_t D;
  unsigned group_shift;  // broadcast: group of column d = d >> group_shift, when
  bool shift_ok;         // the groups are a power of two (or one per row) wide

  // zero + code * scale of row t's lanes from column d, outliers blended in.
  typename T::V dequant(size_t t, size_t d, size_t len) const {
    using V = typename T::V;
    constexpr size_t W = T::W;
    const size_t i = s->first + t * D + d;
    V z, sc;
    if constexpr (kBroadcast) {
      const size_t g = shift_ok ? d >> group_shift : d / s->group_cols;
      z = T::set1(s->zero[t][g]);
      sc = T::set1(s->scale[t][g]);
    } else {  // per column, padded to a multiple of 16: whole loads
      z = T::load(s->zero[t] + d);
      sc = T::load(s->scale[t] + d);
    }
    V f;
    if constexpr (kFast) {
      f = u.unpack(i);
    } else {
      float cf[W] = {};
      for (size_t k = 0; k < len; ++k)
        cf[k] = float(dequant_code_at(s->codes, s->codes_bytes, i + k, s->bits));
      f = T::load(cf);
    }
    V v = T::add(z, T::mul(f, sc));
    if constexpr (kMode != CodeMode::plain) {
      if (s->patch_mask != nullptr) {  // outliers: their exact values over the lanes
        const uint64_t word = s->patch_mask[t * s->patch_words + d / 64];
        const unsigned bits = unsigned(word >> (d % 64)) & unsigned((uint64_t(1) << W) - 1);
        if (bits != 0) v = T::blend_load(v, bits, s->patch + t * s->patch_stride + d);
      }
    }
    return v;
  }

  typename T::V at(size_t t, size_t d, size_t len) const {
    const auto v = dequant(t, d, len);
    if constexpr (kFast) return v;
    return len == T::W ? v : T::zero_from(v, len);
  }
};

/// KVQuant's keys: the block's c rows from the codes (outliers blended in), each
/// pair of half-rows turned by rotate-half RoPE at the row's position
/// (QuantSideBlock::rope; D a multiple of 2 W; cpu::rope_row's arithmetic: products
/// rounded, then the sum), into `tile` ([c][D] fp32): the values
/// PackedSide::decode_rows writes, without its per-block setup.
template <class T, class Src>
void rope_rows_tile(const Src& src, const QuantSideBlock& k, size_t D, size_t c, float* tile) {
  constexpr size_t W = T::W;
  const size_t h = D / 2;
  for (size_t t = 0; t < c; ++t) {
    const float* cs = k.rope[t];
    float* row = tile + t * D;
    for (size_t i = 0; i < h; i += W) {
      const auto x1 = src.dequant(t, i, W), x2 = src.dequant(t, i + h, W);
      const auto cv = T::load(cs + i), sv = T::load(cs + h + i);
      T::store(row + i, T::sub(T::mul(x1, cv), T::mul(x2, sv)));
      T::store(row + h + i, T::add(T::mul(x2, cv), T::mul(x1, sv)));
    }
  }
}

template <class T, int HB = T::HB, class KS, class VS>
void attend_block_rows_n(int hb, const KS& ks, const VS& vs, size_t D, size_t c, size_t h0,
                         const AttnBuffers& b) {
  if constexpr (HB == 1) {
    attend_block_rows<T, 1>(ks, vs, D, c, h0, b);
  } else {
    if (hb == HB) return attend_block_rows<T, HB>(ks, vs, D, c, h0, b);
    attend_block_rows_n<T, HB - 1>(hb, ks, vs, D, c, h0, b);
  }
}

/// Calls fn with the row source of side s in mode kMode: per-column or per-group
/// zeros and scales.
template <class T, class U, bool kFast, CodeMode kMode, class Fn>
void with_rows(const QuantSideBlock& s, size_t D, Fn&& fn) {
  if (s.broadcast) {
    unsigned shift = 0;
    bool ok = s.group_cols >= D;  // one group per row: every column's is group 0
    if (ok) {
      shift = 63;
    } else if ((s.group_cols & (s.group_cols - 1)) == 0) {
      ok = true;
      while ((size_t(1) << shift) < s.group_cols) ++shift;
    }
    fn(QuantRowsSrc<T, U, true, kFast, kMode>{U(s), &s, D, shift, ok});
  } else {
    fn(QuantRowsSrc<T, U, false, kFast, kMode>{U(s), &s, D, 0, false});
  }
}

template <class T, class KS, class VS>
void attend_heads_n(size_t n_heads, size_t D, size_t c, const KS& ks, const VS& vs,
                    const AttnBuffers& b) {
  for (size_t h = 0; h < n_heads; h += T::HB) {
    const size_t hb = n_heads - h < size_t(T::HB) ? n_heads - h : size_t(T::HB);
    attend_block_rows_n<T>(int(hb), ks, vs, D, c, h, b);
  }
}

/// Both sides from the codes in mode kMode: plain (KIVI, RotateKV) or patched
/// (outliers in either side).
template <class T, class U, bool kFast, CodeMode kMode>
void dequant_attention_heads(size_t n_heads, size_t D, size_t c, const QuantSideBlock& k,
                             const QuantSideBlock& v, const AttnBuffers& b) {
  with_rows<T, U, kFast, kMode>(k, D, [&](const auto& ks) {
    with_rows<T, U, kFast, kMode>(v, D, [&](const auto& vs) {
      attend_heads_n<T>(n_heads, D, c, ks, vs, b);
    });
  });
}

/// K as fp32 rows ([c][D]), V from the codes (outliers blended in).
template <class T, class U, bool kFast>
void attention_k_rows(size_t n_heads, size_t D, size_t c, const float* k_rows,
                      const QuantSideBlock& v, const AttnBuffers& b) {
  auto run = [&](const auto& ks) {
    with_rows<T, U, kFast, CodeMode::patched>(
        v, D, [&](const auto& vs) { attend_heads_n<T>(n_heads, D, c, ks, vs, b); });
  };
  const char* k = reinterpret_cast<const char*>(k_rows);
  if (D % T::W == 0)
    run(PagedRows<T, DType::f32, false>{k, D * sizeof(float)});
  else
    run(PagedRows<T, DType::f32, true>{k, D * sizeof(float)});
}

template <class T, class U, bool kFast>
void dequant_attention_modes(size_t n_heads, size_t D, size_t c, const QuantSideBlock& k,
                             const QuantSideBlock& v, const AttnBuffers& b) {
  if (k.rope != nullptr) {  // KVQuant: K RoPE'd into a tile, V from the codes
    thread_local std::vector<float> tile;
    if (tile.size() < c * D) tile.resize(c * D);
    with_rows<T, U, kFast, CodeMode::patched>(
        k, D, [&](const auto& ks) { rope_rows_tile<T>(ks, k, D, c, tile.data()); });
    attention_k_rows<T, U, kFast>(n_heads, D, c, tile.data(), v, b);
  } else if (kFast && factored_block<T>(k, v, D)) {  // KIVI
    factored_attention_heads<T, U>(n_heads, D, c, k, v, b);
  } else if (k.patch_mask != nullptr || v.patch_mask != nullptr) {
    dequant_attention_heads<T, U, kFast, CodeMode::patched>(n_heads, D, c, k, v, b);
  } else {
    dequant_attention_heads<T, U, kFast, CodeMode::plain>(n_heads, D, c, k, v, b);
  }
}

/// One block of c valid rows for all n_heads query heads of a one-KV-head state, in
/// the head passes attention_blocks_typed makes (T::HB heads at a time).
template <class T, class U>
void dequant_attention_block_path(size_t n_heads, size_t D, size_t bt, size_t c,
                                  const QuantSideBlock& k, const QuantSideBlock& v, float* state,
                                  float* sc) {
  const size_t dp = (D + 15) / 16 * 16, bp = (bt + 15) / 16 * 16;
  const AttnBuffers b{state, state + n_heads * dp, state + 2 * n_heads * dp, sc, dp, bp};
  if (U::block_fast(k, D, c) && U::block_fast(v, D, c))
    dequant_attention_modes<T, U, true>(n_heads, D, c, k, v, b);
  else
    dequant_attention_modes<T, U, false>(n_heads, D, c, k, v, b);
}

/// dequant_attention_block_path with the block's K rows given as fp32 ([c][D],
/// decoded by the caller) and V from the codes.
template <class T, class U>
void dequant_attention_block_v_path(size_t n_heads, size_t D, size_t bt, size_t c,
                                    const float* k_rows, const QuantSideBlock& v, float* state,
                                    float* sc) {
  const size_t dp = (D + 15) / 16 * 16, bp = (bt + 15) / 16 * 16;
  const AttnBuffers b{state, state + n_heads * dp, state + 2 * n_heads * dp, sc, dp, bp};
  if (U::block_fast(v, D, c))
    attention_k_rows<T, U, true>(n_heads, D, c, k_rows, v, b);
  else
    attention_k_rows<T, U, false>(n_heads, D, c, k_rows, v, b);
}

}  // namespace
}  // namespace vc::cpu

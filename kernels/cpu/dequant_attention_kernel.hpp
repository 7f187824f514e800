// Internal: attention of one row's query heads over one block of K/V rows that are
// quantized codes, dequantized in registers, generic over a SIMD traits type and a
// code unpacker (dequant_attention_{scalar,avx2,avx512}.cpp). The attention
// arithmetic is attention_kernel.hpp's attend_block_rows; only where its K and V
// vectors come from differs: QuantRowsSrc::at unpacks W codes and computes
// zero + code * scale, the multiply and the add rounded separately (the files that
// include this are compiled with -ffp-contract=off, and the SIMD traits reach an
// addition from a product only through an explicit fmadd), so each vector equals
// the one dequantize_rows writes and the bits equal attending to the written rows.
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

#include "kernels/cpu/attention_kernel.hpp"
#include "kernels/cpu/dequant_attention.hpp"
#include "kernels/cpu/dequant_code.hpp"

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// Rows of one side as codes: row t's W lanes from column d (len valid, the rest 0).
/// kFast: the block's vectors all unpack whole (U::block_fast).
template <class T, class U, bool kBroadcast, bool kFast>
struct QuantRowsSrc {
  U u;
  const QuantSideBlock* s;
  size_t D;
  unsigned group_shift;  // broadcast: group of column d = d >> group_shift, when
  bool shift_ok;         // the groups are a power of two (or one per row) wide
  typename T::V at(size_t t, size_t d, size_t len) const {
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
    const V v = T::add(z, T::mul(f, sc));
    if constexpr (kFast) return v;
    return len == W ? v : T::zero_from(v, len);
  }
};

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

/// Calls fn with the row source of side s: per-column or per-group zeros and scales.
template <class T, class U, bool kFast, class Fn>
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
    fn(QuantRowsSrc<T, U, true, kFast>{U(s), &s, D, shift, ok});
  } else {
    fn(QuantRowsSrc<T, U, false, kFast>{U(s), &s, D, 0, false});
  }
}

template <class T, class U, bool kFast>
void dequant_attention_heads(size_t n_heads, size_t D, size_t c, const QuantSideBlock& k,
                             const QuantSideBlock& v, const AttnBuffers& b) {
  with_rows<T, U, kFast>(k, D, [&](const auto& ks) {
    with_rows<T, U, kFast>(v, D, [&](const auto& vs) {
      for (size_t h = 0; h < n_heads; h += T::HB) {
        const size_t hb = n_heads - h < size_t(T::HB) ? n_heads - h : size_t(T::HB);
        attend_block_rows_n<T>(int(hb), ks, vs, D, c, h, b);
      }
    });
  });
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
    dequant_attention_heads<T, U, true>(n_heads, D, c, k, v, b);
  else
    dequant_attention_heads<T, U, false>(n_heads, D, c, k, v, b);
}

}  // namespace
}  // namespace vc::cpu

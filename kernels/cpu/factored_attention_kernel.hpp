// Internal: the drafter's attention over a block of quantized rows with the
// dequantization factored out of the inner loops (included by
// dequant_attention_kernel.hpp, for KIVI's layout: blocks whose codes unpack
// whole, hold no outlier and no RoPE, keys quantized per column and values per
// groups of a row). With value = zero + code * scale:
//   keys (zero and scale per channel over a group of tokens):
//     score(t) = sum_d (q[d] * scale[d]) * code(t, d) + sum_d q[d] * zero[d]
//     -- q * scale and q . zero once per group of tokens, then a plain dot product
//        of the codes;
//   values (zero and scale per group g of a row's columns):
//     o[d] = sum_t (p(t) * scale(t, g)) * code(t, d) + sum_t p(t) * zero(t, g).
// The inner loops are then an unpack and one fma per head, where dequantizing
// first costs a multiply, an add and two parameter loads more per vector. (Keys
// in per-row groups, RotateKV's, gain nothing so: their scale changes with every
// row, and they take the dequantizing kernel.) The
// arithmetic differs from attending to the dequantized rows (dequant_attention.hpp)
// by float rounding: the drafter's results are not part of the exactness contract,
// which the verifier alone carries. It is still a fixed function of one row's
// query, the block's codes and the block's position: batch-invariant and the same
// for any thread count. The probabilities and the merge into the running state
// are attention_kernel.hpp's.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/cpu/attention_kernel.hpp"
#include "kernels/cpu/dequant_attention.hpp"

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// Per-thread scratch of the factored kernel, grown on demand.
struct FactoredScratch {
  std::vector<float> qk;     // keys per column: [HB][dp] q * scale of the current group row
  std::vector<float> vpar;   // values: [2][Gv][bp] scale(t, g), zero(t, g) of the block
  std::vector<float> pscale; // values: [HB][Gv][bp] p(t) * scale(t, g)
  std::vector<float> zsum;   // values: [HB][Gv] sum_t p(t) * zero(t, g)
};

inline FactoredScratch& factored_scratch() {
  thread_local FactoredScratch s;
  return s;
}

/// Groups of a broadcast side's row: one per group_cols columns (one when a group
/// spans the row).
inline size_t row_groups(const QuantSideBlock& s, size_t D) {
  return s.group_cols >= D ? 1 : (D + s.group_cols - 1) / s.group_cols;
}

/// One block of c positions (all codes whole: U::block_fast, D a multiple of W, no
/// outlier, no RoPE; keys with a zero and scale per column, values in per-row
/// groups) for query heads h0 .. h0+HB.
template <class T, class U, int HB>
void attend_factored_rows(const U& uk, const U& uv, const QuantSideBlock& k,
                          const QuantSideBlock& v, size_t D, size_t c, size_t h0,
                          const AttnBuffers& buf) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  constexpr int DV = T::DV;
  static_assert(HB <= 4 && 2 * HB <= int(W), "at most 4 heads; their merge factors fit one vector");
  HeadPass<HB> hp(buf, h0);
  // b: the pass's scores (sc, bp) and the query row stride (dp) of the qk scratch.
  const struct {
    float* sc;
    size_t bp, dp;
  } b{hp.sc, hp.bp, buf.dp};
  FactoredScratch& fs = factored_scratch();
  const size_t nvec = D / W;

  // Scores, four positions at a time (a last partial group repeats position c-1).
  {
    if (fs.qk.size() < size_t(HB) * b.dp) fs.qk.resize(size_t(HB) * b.dp);
    float* qk = fs.qk.data();
    const float* cur = nullptr;  // the group row qk was made for
    float c0[HB][4];             // q . zero, repeated for store4's four positions
    auto use_group_row = [&](size_t t) {
      if (k.zero[t] == cur) return;
      cur = k.zero[t];
      const float* z = k.zero[t];
      const float* s = k.scale[t];
      for (int h = 0; h < HB; ++h) {
        V cz = T::zero();
        for (size_t d = 0; d < D; d += W) {
          const V q = T::load(hp.qs[h] + d);
          T::store(qk + size_t(h) * b.dp + d, T::mul(q, T::load(s + d)));
          cz = T::fmadd(q, T::load(z + d), cz);
        }
        float r[4];
        T::reduce4(cz, cz, cz, cz, r);
        for (int p = 0; p < 4; ++p) c0[h][p] = r[0];
      }
    };
    for (size_t t = 0; t < c; t += 4) {
      size_t kp[4];
      for (int p = 0; p < 4; ++p) kp[p] = t + size_t(p) < c ? t + size_t(p) : c - 1;
      const size_t n = c - t < 4 ? c - t : 4;
      if (k.zero[kp[0]] == k.zero[kp[3]]) {  // one group row for all four
        use_group_row(kp[0]);
        V acc[HB][4];
        for (int h = 0; h < HB; ++h)
          for (int p = 0; p < 4; ++p) acc[h][p] = T::zero();
        for (size_t d = 0; d < D; d += W) {
          V qv[HB];
          for (int h = 0; h < HB; ++h) qv[h] = T::load(qk + size_t(h) * b.dp + d);
          for (int p = 0; p < 4; ++p) {
            const V kv = uk.unpack(k.first + kp[p] * D + d);
            for (int h = 0; h < HB; ++h) acc[h][p] = T::fmadd(qv[h], kv, acc[h][p]);
          }
        }
        for (int h = 0; h < HB; ++h)
          T::store4(b.sc + size_t(h) * b.bp + t,
                    T::reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), c0[h], n);
      } else {  // the four straddle two group rows: one position at a time
        for (size_t p = 0; p < n; ++p) {
          use_group_row(t + p);
          V acc[HB];
          for (int h = 0; h < HB; ++h) acc[h] = T::zero();
          for (size_t d = 0; d < D; d += W) {
            const V kv = uk.unpack(k.first + (t + p) * D + d);
            for (int h = 0; h < HB; ++h)
              acc[h] = T::fmadd(T::load(qk + size_t(h) * b.dp + d), kv, acc[h]);
          }
          for (int h = 0; h < HB; ++h)
            T::store4(b.sc + size_t(h) * b.bp + t + p, T::reduce4(acc[h], acc[h], acc[h], acc[h]),
                      c0[h], 1);
        }
      }
    }
  }

  float fab[W] = {};
  block_probabilities<T, HB>(hp, c, fab);

  // Values: each position's scale and zero per group, p * scale per head, and the
  // zero terms sum_t p(t) * zero(t, g) (pad positions: p = 0).
  const size_t gv = row_groups(v, D), cw = (c + W - 1) / W * W;
  if (fs.vpar.size() < 2 * gv * b.bp) fs.vpar.resize(2 * gv * b.bp);
  if (fs.pscale.size() < size_t(HB) * gv * b.bp) fs.pscale.resize(size_t(HB) * gv * b.bp);
  float* vs = fs.vpar.data();
  float* vz = vs + gv * b.bp;
  for (size_t g = 0; g < gv; ++g) {
    for (size_t t = 0; t < c; ++t) {
      vs[g * b.bp + t] = v.scale[t][g];
      vz[g * b.bp + t] = v.zero[t][g];
    }
    for (size_t t = c; t < cw; ++t) vs[g * b.bp + t] = vz[g * b.bp + t] = 0.f;
  }
  if (fs.zsum.size() < size_t(HB) * gv) fs.zsum.resize(size_t(HB) * gv);
  float* zsum = fs.zsum.data();
  for (int h = 0; h < HB; ++h) {
    const float* p = b.sc + size_t(h) * b.bp;
    for (size_t g = 0; g < gv; ++g) {
      float* ps = fs.pscale.data() + (size_t(h) * gv + g) * b.bp;
      V zacc = T::zero();
      for (size_t t = 0; t < cw; t += W) {
        const V pv = T::load(p + t);
        T::store(ps + t, T::mul(pv, T::load(vs + g * b.bp + t)));
        zacc = T::fmadd(pv, T::load(vz + g * b.bp + t), zacc);
      }
      float r[4];
      T::reduce4(zacc, zacc, zacc, zacc, r);
      zsum[size_t(h) * gv + g] = r[0];
    }
  }

  // Weighted V of the block, DV vectors of head_dim per pass, position order.
  for (size_t d0 = 0; d0 < D; d0 += size_t(DV) * W) {
    const size_t nv = nvec - d0 / W < size_t(DV) ? nvec - d0 / W : size_t(DV);
    const float* pp[HB][DV];  // p * scale of vector i's group, per head
    size_t gi[DV];
    for (int i = 0; i < DV; ++i) {
      const size_t d = d0 + size_t(i) * W;
      gi[i] = gv == 1 || size_t(i) >= nv ? 0 : d / v.group_cols;
      for (int h = 0; h < HB; ++h) pp[h][i] = fs.pscale.data() + (size_t(h) * gv + gi[i]) * b.bp;
    }
    V acc[HB][DV];
    for (int h = 0; h < HB; ++h)
      for (int i = 0; i < DV; ++i) acc[h][i] = T::zero();
    if (nv == size_t(DV)) {
      for (size_t t = 0; t < c; ++t) {
        V vv[DV];
        for (int i = 0; i < DV; ++i) vv[i] = uv.unpack(v.first + t * D + d0 + size_t(i) * W);
        for (int h = 0; h < HB; ++h)
          for (int i = 0; i < DV; ++i) acc[h][i] = T::fmadd(T::set1(pp[h][i][t]), vv[i], acc[h][i]);
      }
    } else {  // the last, narrower pass over head_dim
      for (size_t t = 0; t < c; ++t) {
        V vv[DV];
        for (int i = 0; i < DV; ++i)
          vv[i] = size_t(i) < nv ? uv.unpack(v.first + t * D + d0 + size_t(i) * W) : T::zero();
        for (int h = 0; h < HB; ++h)
          for (int i = 0; i < DV; ++i) acc[h][i] = T::fmadd(T::set1(pp[h][i][t]), vv[i], acc[h][i]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (size_t i = 0; i < nv; ++i) {
        acc[h][i] = T::add(acc[h][i], T::set1(zsum[size_t(h) * gv + gi[i]]));
      }
    merge_block_output<T, HB, DV>(hp, fab, d0, nv, acc);
  }

  hp.store();
}

template <class T, class U, int HB = T::HB>
void attend_factored_n(int hb, const U& uk, const U& uv, const QuantSideBlock& k,
                       const QuantSideBlock& v, size_t D, size_t c, size_t h0,
                       const AttnBuffers& b) {
  if constexpr (HB == 1) {
    attend_factored_rows<T, U, 1>(uk, uv, k, v, D, c, h0, b);
  } else {
    if (hb == HB) return attend_factored_rows<T, U, HB>(uk, uv, k, v, D, c, h0, b);
    attend_factored_n<T, U, HB - 1>(hb, uk, uv, k, v, D, c, h0, b);
  }
}

/// True when a block of fast codes (the caller's U::block_fast) can take the
/// factored kernel: D a multiple of W, no outlier, no RoPE, values in per-row groups.
template <class T>
bool factored_block(const QuantSideBlock& k, const QuantSideBlock& v, size_t D) {
  return D % T::W == 0 && k.patch_mask == nullptr && v.patch_mask == nullptr &&
         k.rope == nullptr && v.rope == nullptr && !k.broadcast && v.broadcast;
}

/// All n_heads query heads of a one-KV-head state over one block, T::HB at a time.
template <class T, class U>
void factored_attention_heads(size_t n_heads, size_t D, size_t c, const QuantSideBlock& k,
                              const QuantSideBlock& v, const AttnBuffers& b) {
  const U uk(k), uv(v);
  for (size_t h = 0; h < n_heads; h += T::HB) {
    const int hb = int(n_heads - h < size_t(T::HB) ? n_heads - h : size_t(T::HB));
    attend_factored_n<T, U>(hb, uk, uv, k, v, D, c, h, b);
  }
}

}  // namespace
}  // namespace vc::cpu

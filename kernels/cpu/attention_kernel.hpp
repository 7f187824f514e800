// Internal: attention of one query row over a paged KV cache, generic over a SIMD
// traits type (simd_scalar.hpp, simd_avx2.hpp, simd_avx512.hpp). Included only by
// attention_{scalar,avx2,avx512}.cpp.
//
// For query head h (KV head g = h / group), with qs = q[h] * scale (zero-padded):
//   score(t)  = reduce(sum over d-steps of fma(qs[d:d+W], k_t[d:d+W], acc))
//               -- the matmul's per-element dot product, head_dim tail masked
//   per KV block j (positions j*bt .. min((j+1)*bt, n_ctx) - 1, fixed by position):
//     m_j = max score;  p(t) = exp(score(t) - m_j)
//     l_j = reduce(sum of the p vectors, W positions per step)
//     o_j[d] = sum over t in order of p(t) * v_t[d]   (fma, position order)
//   merged in block order:  M' = max(M, m_j), a = exp(M - M'), b = exp(m_j - M'),
//     L' = fma(L, a, l_j * b),  O' = fma(O, a, o_j * b)
//   out = O / L
// Positions >= n_ctx are never read. Query heads that share a KV head are done
// together (HB per pass) so each K/V vector is loaded and converted once, but all
// lane operations stay within one head, so each head's result is bit-identical to
// computing it alone; likewise scores are reduced four positions at a time with a
// lane-independent reduction. Memory: blocks are the outer loop (all KV heads of a
// block are adjacent), scattered blocks are software-prefetched; at long context
// the kernel is bound by DRAM bandwidth, not arithmetic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/matmul_kernel.hpp"  // load_w / load_w_n: typed loads to f32

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// Loads `len` (<= W) floats of a K/V row, converted; lanes past len are 0.
/// kTail is false when head_dim is a multiple of W: then every load is full and
/// the inner loops have no branches (and no masked-load builtins, which would
/// make GCC keep the accumulator arrays in memory).
template <class T, DType KT, bool kTail>
inline typename T::V load_kv(const void* base, size_t i, size_t len) {
  if constexpr (kTail) {
    return len == T::W ? load_w<T, KT>(base, i) : load_w_n<T, KT>(base, i, len);
  } else {
    return load_w<T, KT>(base, i);
  }
}

// Cache level software prefetches target (__builtin_prefetch locality: 3 = L1,
// 2 = L2); measured on Zen 4: L2 is better, L1 evicts the block being computed.
constexpr int kPrefetchLocality = 2;
// How many blocks ahead.
constexpr size_t kPrefetchAhead = 2;

/// Per-thread scratch of attention_typed (see attention_scratch_floats).
struct AttnBuffers {
  float* qs;     // [n_heads][dp] scaled, zero-padded queries
  float* o;      // [n_heads][dp] running weighted V
  float* stats;  // [n_heads][2] running max, running sum
  float* sc;     // [HB][bp] scores, then probabilities, of one block
  size_t dp, bp;
};

/// One side (K or V) of a KV block in the paged layout: row t's W lanes from
/// column d (len of them valid; the rest 0), converted from KT.
template <class T, DType KT, bool kTail>
struct PagedRows {
  const char* base;
  size_t row_bytes;
  typename T::V at(size_t t, size_t d, size_t len) const {
    return load_kv<T, KT, kTail>(base + t * row_bytes, d, len);
  }
};

/// The HB query heads of one pass over a KV block: each head's scaled query,
/// running output and (max, sum) in its row's state, and the running max and sum
/// loaded into the pass; store() writes them back. The heads are h0 .. h0+HB of one
/// row's state, or the same `per_row` heads of several rows (rows of one sequence,
/// all on one KV head): every lane operation of the pass stays within one head, so
/// a head's bits do not depend on which heads share its pass.
template <int HB>
struct HeadPass {
  const float* qs[HB];
  float* o[HB];
  float* stats[HB];
  float* sc;  // [HB][bp] scores, then probabilities, of the block
  size_t bp;
  float run_max[HB], run_sum[HB];
  HeadPass(const AttnBuffers& buf, size_t h0) : sc(buf.sc), bp(buf.bp) {
    for (int h = 0; h < HB; ++h) bind(h, buf, h0 + size_t(h));
  }
  /// Heads h0 .. h0+per_row of rows[0], then of rows[1], ... (HB / per_row rows).
  HeadPass(const AttnBuffers* rows, size_t per_row, size_t h0) : sc(rows[0].sc), bp(rows[0].bp) {
    for (int h = 0; h < HB; ++h) bind(h, rows[size_t(h) / per_row], h0 + size_t(h) % per_row);
  }
  void store() const {
    for (int h = 0; h < HB; ++h) {
      stats[h][0] = run_max[h];
      stats[h][1] = run_sum[h];
    }
  }

 private:
  void bind(int i, const AttnBuffers& buf, size_t h) {
    qs[i] = buf.qs + h * buf.dp;
    o[i] = buf.o + h * buf.dp;
    stats[i] = buf.stats + 2 * h;
    run_max[i] = stats[i][0];
    run_sum[i] = stats[i][1];
  }
};

/// The block's probabilities and merge factors, from its scores in b.sc (c valid
/// positions per head): the block max m_j, p(t) = exp(score(t) - m_j) in place of
/// the scores (pad lanes up to a whole vector: 0), and per head h fab[2h] = exp(M -
/// M') and fab[2h+1] = exp(m_j - M') (fab: W floats, zeroed), with the running max
/// and sum moved to M' and L' = fma(L, a, l_j * b).
template <class T, int HB>
inline void block_probabilities(HeadPass<HB>& hp, size_t c, float* fab) {
  float(&run_max)[HB] = hp.run_max;
  float(&run_sum)[HB] = hp.run_sum;
  using V = typename T::V;
  constexpr size_t W = T::W;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Block max, probabilities and their sum (pad lanes: score -inf -> p = 0).
  const size_t cw = (c + W - 1) / W * W;
  float bmax[HB];
  V psum[4];
  for (int h = 0; h < 4; ++h) psum[h] = T::zero();
  for (int h = 0; h < HB; ++h) {
    float* sc = hp.sc + size_t(h) * hp.bp;
    for (size_t t = c; t < cw; ++t) sc[t] = neg_inf;
    V mv = T::load(sc);
    for (size_t t = W; t < cw; t += W) mv = T::max(mv, T::load(sc + t));
    bmax[h] = T::reduce_max(mv);
    const V mb = T::set1(bmax[h]);
    for (size_t t = 0; t < cw; t += W) {
      const V p = T::exp(T::sub(T::load(sc + t), mb));
      T::store(sc + t, p);
      psum[h] = T::add(psum[h], p);
    }
  }

  // Merge factors a = exp(M - M'), b = exp(m_j - M') of all heads: one exp.
  float mnew[HB], lsum[4];
  for (int h = 0; h < HB; ++h) {
    mnew[h] = run_max[h] > bmax[h] ? run_max[h] : bmax[h];
    fab[2 * h] = run_max[h];
    fab[2 * h + 1] = bmax[h];
  }
  {
    float mm[W] = {};
    for (int h = 0; h < HB; ++h) mm[2 * h] = mm[2 * h + 1] = mnew[h];
    T::store(fab, T::exp(T::sub(T::load(fab), T::load(mm))));
  }
  T::store4(lsum, T::reduce4(psum[0], psum[1], psum[2], psum[3]), nullptr, 4);
  for (int h = 0; h < HB; ++h) {
    const V lb = T::mul(T::set1(lsum[h]), T::set1(fab[2 * h + 1]));
    float tmp[W];
    T::store(tmp, T::fmadd(T::set1(run_sum[h]), T::set1(fab[2 * h]), lb));
    run_sum[h] = tmp[0];
    run_max[h] = mnew[h];
  }
}

/// O' = fma(O, a, o_j * b) for head_dim vectors [d0 / W, d0 / W + nv) of heads
/// h0.. (b's slices), o_j the block's weighted V in acc.
template <class T, int HB, int DV>
inline void merge_block_output(const HeadPass<HB>& hp, const float* fab, size_t d0, size_t nv,
                               const typename T::V (&acc)[HB][DV]) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  for (int h = 0; h < HB; ++h) {
    const V va = T::set1(fab[2 * h]), vbf = T::set1(fab[2 * h + 1]);
    for (size_t i = 0; i < nv; ++i) {
      float* o = hp.o[h] + d0 + i * W;
      T::store(o, T::fmadd(T::load(o), va, T::mul(acc[h][i], vbf)));
    }
  }
}

/// acc[h][i] = sum over positions t < c, in order, of p_h(t) * v_t[d0 + i W ..]
/// (fma), for the nv head_dim vectors from d0 (the rest zero), p_h(t) the block's
/// probabilities in b.sc. Kept out of line: inlined, GCC kept the caller's merge
/// factors in registers across this loop and spilled an accumulator to the stack,
/// putting a store and a reload on its chain every position.
template <class T, int HB, class VS>
[[gnu::noinline]] void weighted_v(const VS& vs, const HeadPass<HB>& b, size_t D, size_t c,
                                  size_t d0, size_t nv, typename T::V (&out)[HB][T::DV]) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  constexpr int DV = T::DV;
  V acc[HB][DV];
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < DV; ++i) acc[h][i] = T::zero();
  if (nv == size_t(DV)) {
    for (size_t t = 0; t < c; ++t) {
      V vv[DV];
      for (int i = 0; i < DV; ++i) {
        const size_t d = d0 + size_t(i) * W;
        vv[i] = vs.at(t, d, D - d < W ? D - d : W);
      }
      for (int h = 0; h < HB; ++h) {
        const V p = T::set1(b.sc[size_t(h) * b.bp + t]);
        for (int i = 0; i < DV; ++i) acc[h][i] = T::fmadd(p, vv[i], acc[h][i]);
      }
    }
  } else {  // the last, narrower pass over head_dim
    for (size_t t = 0; t < c; ++t) {
      V vv[DV];
      for (int i = 0; i < DV; ++i) {
        const size_t d = d0 + size_t(i) * W;
        vv[i] = size_t(i) < nv ? vs.at(t, d, D - d < W ? D - d : W) : T::zero();
      }
      for (int h = 0; h < HB; ++h) {
        const V p = T::set1(b.sc[size_t(h) * b.bp + t]);
        for (int i = 0; i < DV; ++i) acc[h][i] = T::fmadd(p, vv[i], acc[h][i]);
      }
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < DV; ++i) out[h][i] = acc[h][i];
}

/// acc[h][p] = the dot product of head h's query with the K row of position
/// min(t + p, c - 1), lanes not yet reduced (the matmul's per-element order).
template <class T, int HB, class KS>
inline void score_lanes(const KS& ks, const HeadPass<HB>& b, size_t D, size_t c, size_t t,
                        typename T::V (&acc)[HB][4]) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  size_t kp[4];
  for (int p = 0; p < 4; ++p) kp[p] = t + size_t(p) < c ? t + size_t(p) : c - 1;
  for (int h = 0; h < HB; ++h)
    for (int p = 0; p < 4; ++p) acc[h][p] = T::zero();
  for (size_t d = 0; d < D; d += W) {
    const size_t len = D - d < W ? D - d : W;
    V qv[HB];
    for (int h = 0; h < HB; ++h) qv[h] = T::load(b.qs[h] + d);
    for (int p = 0; p < 4; ++p) {
      const V kvec = ks.at(kp[p], d, len);
      for (int h = 0; h < HB; ++h) acc[h][p] = T::fmadd(qv[h], kvec, acc[h][p]);
    }
  }
}

/// The block's scores into b.sc (head h at b.sc + h * b.bp), c valid positions;
/// lanes past c up to the next multiple of four (of W where the traits reduce
/// sixteen at once) hold repeats of position c - 1 or zeros, overwritten by
/// block_probabilities.
template <class T, int HB, class KS>
inline void block_scores(const KS& ks, const HeadPass<HB>& b, size_t D, size_t c) {
  using V = typename T::V;
  if constexpr (requires(V v) { T::reduce16_finish(v, v); }) {
    // Sixteen positions per step, their sums reduced together and stored whole (a
    // vector load of the scores then reads one store, not four partial ones).
    static_assert(T::W == 16);
    for (size_t t = 0; t < c; t += 16) {
      V r[HB], u[HB];
      for (size_t s = 0; s < 4; ++s) {
        V acc[HB][4];
        if (t + 4 * s < c) {
          score_lanes<T, HB>(ks, b, D, c, t + 4 * s, acc);
        } else {
          for (int h = 0; h < HB; ++h)
            for (int p = 0; p < 4; ++p) acc[h][p] = T::zero();
        }
        for (int h = 0; h < HB; ++h) {
          const V q = T::reduce4_quarters(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
          if (s == 0 || s == 2) {
            r[h] = q;
          } else if (s == 1) {
            u[h] = T::reduce16_pair(r[h], q);
          } else {
            T::store(b.sc + size_t(h) * b.bp + t,
                     T::reduce16_finish(u[h], T::reduce16_pair(r[h], q)));
          }
        }
      }
    }
  } else {
    // Four positions at a time (a last partial group repeats position c-1; the
    // extra results are not stored).
    for (size_t t = 0; t < c; t += 4) {
      V acc[HB][4];
      score_lanes<T, HB>(ks, b, D, c, t, acc);
      const size_t n = c - t < 4 ? c - t : 4;
      for (int h = 0; h < HB; ++h) {
        T::store4(b.sc + size_t(h) * b.bp + t,
                  T::reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), nullptr, n);
      }
    }
  }
}

/// One KV block (c valid positions, head_dim D) for the heads of a pass: scores,
/// probabilities, weighted V, merged into the heads' running state (in hp; the
/// caller stores it). K and V rows come from ks.at(t, d, len) and vs.at(t, d, len)
/// (PagedRows, or rows dequantized in registers: dequant_attention_kernel.hpp); the
/// arithmetic on them is the same whatever their source, so equal values give
/// equal bits.
template <class T, int HB, class KS, class VS>
void attend_pass(const KS& ks, const VS& vs, size_t D, size_t c, HeadPass<HB>& hp) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  constexpr int DV = T::DV;
  static_assert(HB <= 4 && 2 * HB <= int(W), "at most 4 heads; their merge factors fit one vector");
  block_scores<T, HB>(ks, hp, D, c);

  float fab[W] = {};
  block_probabilities<T, HB>(hp, c, fab);

  // Weighted V of the block, DV vectors of head_dim per pass, position order.
  for (size_t d0 = 0; d0 < D; d0 += size_t(DV) * W) {
    const size_t nv = (D - d0 + W - 1) / W < size_t(DV) ? (D - d0 + W - 1) / W : size_t(DV);
    V acc[HB][DV];
    weighted_v<T, HB>(vs, hp, D, c, d0, nv, acc);
    merge_block_output<T, HB, DV>(hp, fab, d0, nv, acc);
  }
}

/// attend_pass for query heads h0 .. h0+HB of one row's state.
template <class T, int HB, class KS, class VS>
void attend_block_rows(const KS& ks, const VS& vs, size_t D, size_t c, size_t h0,
                       const AttnBuffers& buf) {
  HeadPass<HB> hp(buf, h0);
  attend_pass<T, HB>(ks, vs, D, c, hp);
  hp.store();
}

/// The K and V rows of KV head g in block j of the paged layout.
template <class T, DType KT, bool kTail>
struct PagedBlock {
  PagedRows<T, KT, kTail> k, v;
  PagedBlock(const PagedKv& kv, size_t g, size_t j) : k(), v() {
    const size_t D = kv.head_dim, esz = sizeof(WElem<KT>);
    const size_t off = (size_t(kv.block_table[j]) * kv.kv_heads + g) * kv.block_tokens * D * esz;
    k = {static_cast<const char*>(kv.k) + off, D * esz};
    v = {static_cast<const char*>(kv.v) + off, D * esz};
  }
};

/// One KV block j of the paged layout for query heads h0 .. h0+HB (all on KV head g).
template <class T, DType KT, bool kTail, int HB>
void attend_block(const PagedKv& kv, size_t g, size_t h0, size_t j, size_t n_ctx,
                  const AttnBuffers& buf) {
  const size_t bt = kv.block_tokens;
  const size_t c = (j + 1) * bt <= n_ctx ? bt : n_ctx - j * bt;  // valid positions
  const PagedBlock<T, KT, kTail> blk(kv, g, j);
  attend_block_rows<T, HB>(blk.k, blk.v, kv.head_dim, c, h0, buf);
}

/// One whole KV block j for the query heads of KV head g (group of them from h0)
/// of rows[0 .. HB / group), in one pass.
template <class T, DType KT, bool kTail, int HB>
void attend_block_of_rows(const PagedKv& kv, size_t g, size_t group, size_t j,
                          const AttnBuffers* rows) {
  const PagedBlock<T, KT, kTail> blk(kv, g, j);
  HeadPass<HB> hp(rows, group, g * group);
  attend_pass<T, HB>(blk.k, blk.v, kv.head_dim, kv.block_tokens, hp);
  hp.store();
}

template <class T, DType KT, bool kTail, int HB = T::HB>
void attend_block_of_rows_n(int hb, const PagedKv& kv, size_t g, size_t group, size_t j,
                            const AttnBuffers* rows) {
  if constexpr (HB == 1) {
    attend_block_of_rows<T, KT, kTail, 1>(kv, g, group, j, rows);
  } else {
    if (hb == HB) return attend_block_of_rows<T, KT, kTail, HB>(kv, g, group, j, rows);
    attend_block_of_rows_n<T, KT, kTail, HB - 1>(hb, kv, g, group, j, rows);
  }
}

template <class T, DType KT, bool kTail, int HB = T::HB>
void attend_block_n(int hb, const PagedKv& kv, size_t g, size_t h0, size_t j, size_t n_ctx,
                    const AttnBuffers& b) {
  if constexpr (HB == 1) {
    attend_block<T, KT, kTail, 1>(kv, g, h0, j, n_ctx, b);
  } else {
    if (hb == HB) return attend_block<T, KT, kTail, HB>(kv, g, h0, j, n_ctx, b);
    attend_block_n<T, KT, kTail, HB - 1>(hb, kv, g, h0, j, n_ctx, b);
  }
}

/// Blocks [j_begin, j_end) (those below ceil(n_ctx / bt)) for KV heads [g_begin,
/// g_end) with all their query heads, merged into the running `state` ([n_heads]
/// scaled queries, [n_heads] running outputs, [n_heads] (max, sum); see
/// attention_state_floats). Blocks are the outer loop so the K/V of all these KV
/// heads in one block (adjacent in memory) are read together, and scattered blocks
/// are requested kPrefetchAhead blocks ahead. Calling it over consecutive block
/// ranges in ascending order gives the bits of one call over their union: each
/// block's arithmetic and the merge order depend only on the block's position.
template <class T, DType KT, bool kTail>
void attention_blocks_typed(size_t n_heads, const PagedKv& kv, size_t n_ctx, size_t j_begin,
                            size_t j_end, float* state, float* sc, size_t g_begin, size_t g_end) {
  const size_t D = kv.head_dim, bt = kv.block_tokens, esz = sizeof(WElem<KT>);
  const size_t group = n_heads / kv.kv_heads;
  const size_t dp = (D + 15) / 16 * 16, bp = (bt + 15) / 16 * 16;
  const AttnBuffers b{state, state + n_heads * dp, state + 2 * n_heads * dp, sc, dp, bp};
  const size_t nblocks = (n_ctx + bt - 1) / bt;
  if (j_end > nblocks) j_end = nblocks;
  const size_t span = (g_end - g_begin) * bt * D * esz;  // bytes of our heads per block
  const bool partial_heads = g_end - g_begin < kv.kv_heads;
  for (size_t j = j_begin; j < j_end; ++j) {
    // The hardware prefetchers follow a contiguous stream (consecutive physical
    // blocks, all KV heads of a block) but lose it at a jump to a scattered block
    // or when this thread reads only some heads of each block (strided): then
    // request the K and V of the next block while this one is computed, so that
    // long contexts (DRAM-bound) keep enough reads in flight.
    const size_t jp = j + kPrefetchAhead;
    if (jp < j_end && (partial_heads || kv.block_table[jp] != kv.block_table[jp - 1] + 1)) {
      const size_t poff = (size_t(kv.block_table[jp]) * kv.kv_heads + g_begin) * bt * D * esz;
      const char* pk = static_cast<const char*>(kv.k) + poff;
      const char* pv = static_cast<const char*>(kv.v) + poff;
      for (size_t i = 0; i < span; i += 64) {
        __builtin_prefetch(pk + i, 0, kPrefetchLocality);
        __builtin_prefetch(pv + i, 0, kPrefetchLocality);
      }
    }
    for (size_t g = g_begin; g < g_end; ++g) {
      for (size_t h = g * group; h < (g + 1) * group; h += T::HB) {
        const size_t hb = (g + 1) * group - h < size_t(T::HB) ? (g + 1) * group - h : T::HB;
        attend_block_n<T, KT, kTail>(int(hb), kv, g, h, j, n_ctx, b);
      }
    }
  }
}

/// Blocks [j_begin, j_end), whole for every row, for all KV heads of n_rows rows'
/// states (rows of one sequence, each with all its earlier blocks merged): a KV
/// head's query heads of T::HB / group rows share one pass, so each K and V vector
/// is loaded once for all of them. Each row's bits are those of
/// attention_blocks_typed over the same blocks (HeadPass).
template <class T, DType KT, bool kTail>
void attention_rows_blocks_typed(size_t n_heads, const PagedKv& kv, size_t j_begin, size_t j_end,
                                 float* const* states, size_t n_rows, float* sc) {
  const size_t D = kv.head_dim, bt = kv.block_tokens, esz = sizeof(WElem<KT>);
  const size_t group = n_heads / kv.kv_heads;
  const size_t dp = (D + 15) / 16 * 16, bp = (bt + 15) / 16 * 16;
  const size_t rp = group >= size_t(T::HB) ? 1 : size_t(T::HB) / group;  // rows per pass
  const size_t span = kv.kv_heads * bt * D * esz;
  AttnBuffers rows[kAttentionMaxHeadsPerPass];
  for (size_t j = j_begin; j < j_end; ++j) {
    const size_t jp = j + kPrefetchAhead;
    if (jp < j_end && kv.block_table[jp] != kv.block_table[jp - 1] + 1) {
      const size_t poff = size_t(kv.block_table[jp]) * span;
      for (size_t i = 0; i < span; i += 64) {
        __builtin_prefetch(static_cast<const char*>(kv.k) + poff + i, 0, kPrefetchLocality);
        __builtin_prefetch(static_cast<const char*>(kv.v) + poff + i, 0, kPrefetchLocality);
      }
    }
    for (size_t r0 = 0; r0 < n_rows; r0 += rp) {
      const size_t nr = n_rows - r0 < rp ? n_rows - r0 : rp;
      for (size_t r = 0; r < nr; ++r) {
        float* st = states[r0 + r];
        rows[r] = {st, st + n_heads * dp, st + 2 * n_heads * dp, sc, dp, bp};
      }
      for (size_t g = 0; g < kv.kv_heads; ++g) {
        if (rp == 1) {
          for (size_t h = g * group; h < (g + 1) * group; h += T::HB) {
            const size_t hb = (g + 1) * group - h < size_t(T::HB) ? (g + 1) * group - h : T::HB;
            attend_block_n<T, KT, kTail>(int(hb), kv, g, h, j, (j + 1) * bt, rows[0]);
          }
        } else {
          attend_block_of_rows_n<T, KT, kTail>(int(nr * group), kv, g, group, j, rows);
        }
      }
    }
  }
}

/// out[h] = running output / running sum for the query heads of KV heads
/// [g_begin, g_end).
template <class T>
void attention_finish_typed(size_t n_heads, size_t kv_heads, size_t D, const float* state,
                            float* out, size_t g_begin, size_t g_end) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  const size_t dp = (D + 15) / 16 * 16, group = n_heads / kv_heads;
  const float* o = state + n_heads * dp;
  const float* stats = state + 2 * n_heads * dp;
  for (size_t h = g_begin * group; h < g_end * group; ++h) {
    const V l = T::set1(stats[2 * h + 1]);
    for (size_t d = 0; d < D; d += W) {
      const V r = T::div(T::load(o + h * dp + d), l);
      if (D - d >= W) {
        T::store(out + h * D + d, r);
      } else {
        T::store_n(out + h * D + d, r, D - d);
      }
    }
  }
}

/// The whole row: a fresh state, every block, the division.
template <class T, DType KT, bool kTail>
void attention_typed(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                     float scale, float* out, float* scratch, size_t g_begin, size_t g_end) {
  const size_t D = kv.head_dim;
  attention_state_init(q, n_heads, kv.kv_heads, D, scale, scratch, g_begin, g_end);
  float* sc = scratch + attention_state_floats(n_heads, D);
  attention_blocks_typed<T, KT, kTail>(n_heads, kv, n_ctx, 0, (n_ctx + kv.block_tokens - 1) / kv.block_tokens,
                                       scratch, sc, g_begin, g_end);
  attention_finish_typed<T>(n_heads, kv.kv_heads, D, scratch, out, g_begin, g_end);
}

template <class T>
void attention_path(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx, float scale,
                    float* out, float* scratch, size_t g_begin, size_t g_end) {
  const bool tail = kv.head_dim % T::W != 0;
#define VC_ATTN_CASE(dt)                                                                  \
  case dt:                                                                                \
    return tail ? attention_typed<T, dt, true>(q, n_heads, kv, n_ctx, scale, out, scratch, \
                                               g_begin, g_end)                            \
                : attention_typed<T, dt, false>(q, n_heads, kv, n_ctx, scale, out, scratch, \
                                                g_begin, g_end);
  switch (kv.dtype) {
    VC_ATTN_CASE(DType::f32)
    VC_ATTN_CASE(DType::bf16)
    VC_ATTN_CASE(DType::f16)
  }
#undef VC_ATTN_CASE
}

template <class T>
void attention_rows_blocks_path(size_t n_heads, const PagedKv& kv, size_t j_begin, size_t j_end,
                                float* const* states, size_t n_rows, float* sc) {
  const bool tail = kv.head_dim % T::W != 0;
#define VC_ATTN_CASE(dt)                                                                       \
  case dt:                                                                                     \
    return tail ? attention_rows_blocks_typed<T, dt, true>(n_heads, kv, j_begin, j_end, states, \
                                                           n_rows, sc)                         \
                : attention_rows_blocks_typed<T, dt, false>(n_heads, kv, j_begin, j_end,        \
                                                            states, n_rows, sc);
  switch (kv.dtype) {
    VC_ATTN_CASE(DType::f32)
    VC_ATTN_CASE(DType::bf16)
    VC_ATTN_CASE(DType::f16)
  }
#undef VC_ATTN_CASE
}

template <class T>
void attention_blocks_path(size_t n_heads, const PagedKv& kv, size_t n_ctx, size_t j_begin,
                           size_t j_end, float* state, float* sc, size_t g_begin, size_t g_end) {
  const bool tail = kv.head_dim % T::W != 0;
#define VC_ATTN_CASE(dt)                                                                    \
  case dt:                                                                                  \
    return tail ? attention_blocks_typed<T, dt, true>(n_heads, kv, n_ctx, j_begin, j_end,   \
                                                      state, sc, g_begin, g_end)            \
                : attention_blocks_typed<T, dt, false>(n_heads, kv, n_ctx, j_begin, j_end,  \
                                                       state, sc, g_begin, g_end);
  switch (kv.dtype) {
    VC_ATTN_CASE(DType::f32)
    VC_ATTN_CASE(DType::bf16)
    VC_ATTN_CASE(DType::f16)
  }
#undef VC_ATTN_CASE
}

}  // namespace
}  // namespace vc::cpu

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
// lane-independent reduction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/matmul_kernel.hpp"  // load_w / load_w_n: typed loads to f32

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

/// Lane 0 of a vector.
template <class T>
inline float first_lane(typename T::V a) {
  float tmp[T::W];
  T::store(tmp, a);
  return tmp[0];
}

/// Loads `len` (<= W) floats of a K/V row, converted; lanes past len are 0.
template <class T, DType KT>
inline typename T::V load_kv(const void* base, size_t i, size_t len) {
  return len == T::W ? load_w<T, KT>(base, i) : load_w_n<T, KT>(base, i, len);
}

struct AttnBuffers {
  float* qs;  // [HB][dp] scaled, zero-padded queries
  float* o;   // [HB][dp] running weighted V
  float* sc;  // [HB][bp] scores, then probabilities, of one block
  size_t dp, bp;
};

/// Heads q[0..HB) (all on KV head g), out likewise.
template <class T, DType KT, int HB>
void attend_heads(const float* q, const PagedKv& kv, size_t g, size_t n_ctx, float scale,
                  float* out, const AttnBuffers& b) {
  using V = typename T::V;
  constexpr size_t W = T::W;
  const size_t D = kv.head_dim, bt = kv.block_tokens, esz = sizeof(WElem<KT>);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  for (int h = 0; h < HB; ++h) {
    for (size_t d = 0; d < b.dp; ++d) {
      b.qs[size_t(h) * b.dp + d] = d < D ? q[size_t(h) * D + d] * scale : 0.f;
      b.o[size_t(h) * b.dp + d] = 0.f;
    }
  }
  float run_max[HB], run_sum[HB];
  for (int h = 0; h < HB; ++h) {
    run_max[h] = neg_inf;
    run_sum[h] = 0.f;
  }

  const size_t nblocks = (n_ctx + bt - 1) / bt;
  for (size_t j = 0; j < nblocks; ++j) {
    const size_t c = (j + 1) * bt <= n_ctx ? bt : n_ctx - j * bt;  // valid positions
    const size_t off = (size_t(kv.block_table[j]) * kv.kv_heads + g) * bt * D * esz;
    const char* kb = static_cast<const char*>(kv.k) + off;
    const char* vb = static_cast<const char*>(kv.v) + off;

    // Scores, four positions at a time (the last group repeats position c-1; its
    // extra results are dropped).
    for (size_t t = 0; t < c; t += 4) {
      size_t pos[4];
      for (int p = 0; p < 4; ++p) pos[p] = t + size_t(p) < c ? t + size_t(p) : c - 1;
      V acc[HB][4];
      for (int h = 0; h < HB; ++h)
        for (int p = 0; p < 4; ++p) acc[h][p] = T::zero();
      for (size_t d = 0; d < D; d += W) {
        const size_t len = D - d < W ? D - d : W;
        V qv[HB];
        for (int h = 0; h < HB; ++h) qv[h] = T::load(b.qs + size_t(h) * b.dp + d);
        for (int p = 0; p < 4; ++p) {
          const V kvec = load_kv<T, KT>(kb, pos[p] * D + d, len);
          for (int h = 0; h < HB; ++h) acc[h][p] = T::fmadd(qv[h], kvec, acc[h][p]);
        }
      }
      for (int h = 0; h < HB; ++h) {
        float s[4];
        T::reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3], s);
        for (size_t p = 0; p < 4 && t + p < c; ++p) b.sc[size_t(h) * b.bp + t + p] = s[p];
      }
    }

    // Block max, probabilities and their sum (pad lanes: score -inf -> p = 0).
    const size_t cw = (c + W - 1) / W * W;
    float bmax[HB];
    V psum[HB];
    for (int h = 0; h < HB; ++h) {
      float* sc = b.sc + size_t(h) * b.bp;
      for (size_t t = c; t < cw; ++t) sc[t] = neg_inf;
      V mv = T::set1(neg_inf);
      for (size_t t = 0; t < cw; t += W) mv = T::max(mv, T::load(sc + t));
      bmax[h] = T::reduce_max(mv);
      const V mb = T::set1(bmax[h]);
      psum[h] = T::zero();
      for (size_t t = 0; t < cw; t += W) {
        const V p = T::exp(T::sub(T::load(sc + t), mb));
        T::store(sc + t, p);
        psum[h] = T::add(psum[h], p);
      }
    }

    // Merge factors a = exp(M - M'), b = exp(m_j - M') for all heads at once.
    float fa[HB], fb[HB];
    for (int h = 0; h < HB; ++h) {
      const float mnew = run_max[h] > bmax[h] ? run_max[h] : bmax[h];
      fa[h] = first_lane<T>(T::exp(T::sub(T::set1(run_max[h]), T::set1(mnew))));
      fb[h] = first_lane<T>(T::exp(T::sub(T::set1(bmax[h]), T::set1(mnew))));
      run_max[h] = mnew;
    }
    for (int h0 = 0; h0 < HB; h0 += 4) {
      float l[4];
      const V z = T::zero();
      T::reduce4(psum[h0], h0 + 1 < HB ? psum[h0 + 1] : z, h0 + 2 < HB ? psum[h0 + 2] : z,
                 h0 + 3 < HB ? psum[h0 + 3] : z, l);
      for (int h = h0; h < HB && h < h0 + 4; ++h) {
        const V lb = T::mul(T::set1(l[h - h0]), T::set1(fb[h]));
        run_sum[h] = first_lane<T>(T::fmadd(T::set1(run_sum[h]), T::set1(fa[h]), lb));
      }
    }

    // Weighted V of the block, DV vectors of head_dim per pass, position order.
    for (size_t d0 = 0; d0 < D; d0 += size_t(T::DV) * W) {
      V acc[HB][T::DV];
      for (int h = 0; h < HB; ++h)
        for (int i = 0; i < T::DV; ++i) acc[h][i] = T::zero();
      for (size_t t = 0; t < c; ++t) {
        V vv[T::DV];
        for (int i = 0; i < T::DV; ++i) {
          const size_t d = d0 + size_t(i) * W;
          vv[i] = d < D ? load_kv<T, KT>(vb, t * D + d, D - d < W ? D - d : W) : T::zero();
        }
        for (int h = 0; h < HB; ++h) {
          const V p = T::set1(b.sc[size_t(h) * b.bp + t]);
          for (int i = 0; i < T::DV; ++i) acc[h][i] = T::fmadd(p, vv[i], acc[h][i]);
        }
      }
      for (int h = 0; h < HB; ++h) {
        const V va = T::set1(fa[h]), vbf = T::set1(fb[h]);
        for (int i = 0; i < T::DV; ++i) {
          const size_t d = d0 + size_t(i) * W;
          if (d >= D) break;
          float* o = b.o + size_t(h) * b.dp + d;
          T::store(o, T::fmadd(T::load(o), va, T::mul(acc[h][i], vbf)));
        }
      }
    }
  }

  for (int h = 0; h < HB; ++h) {
    const V inv_l = T::set1(run_sum[h]);
    for (size_t d = 0; d < D; d += W) {
      const V r = T::div(T::load(b.o + size_t(h) * b.dp + d), inv_l);
      if (D - d >= W) {
        T::store(out + size_t(h) * D + d, r);
      } else {
        T::store_n(out + size_t(h) * D + d, r, D - d);
      }
    }
  }
}

template <class T, DType KT, int HB = T::HB>
void attend_heads_n(int hb, const float* q, const PagedKv& kv, size_t g, size_t n_ctx,
                    float scale, float* out, const AttnBuffers& b) {
  if constexpr (HB == 1) {
    attend_heads<T, KT, 1>(q, kv, g, n_ctx, scale, out, b);
  } else {
    if (hb == HB) return attend_heads<T, KT, HB>(q, kv, g, n_ctx, scale, out, b);
    attend_heads_n<T, KT, HB - 1>(hb, q, kv, g, n_ctx, scale, out, b);
  }
}

template <class T, DType KT>
void attention_row_typed(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                         float scale, float* out, float* scratch) {
  static_assert(T::HB <= int(kAttentionMaxHeadsPerPass));
  const size_t dp = (kv.head_dim + 15) / 16 * 16, bp = (kv.block_tokens + 15) / 16 * 16;
  const AttnBuffers b{scratch, scratch + T::HB * dp, scratch + 2 * T::HB * dp, dp, bp};
  const size_t group = n_heads / kv.kv_heads, D = kv.head_dim;
  for (size_t g = 0; g < kv.kv_heads; ++g) {
    for (size_t h = g * group; h < (g + 1) * group; h += T::HB) {
      const size_t hb = (g + 1) * group - h < size_t(T::HB) ? (g + 1) * group - h : T::HB;
      attend_heads_n<T, KT>(int(hb), q + h * D, kv, g, n_ctx, scale, out + h * D, b);
    }
  }
}

template <class T>
void attention_row_path(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                        float scale, float* out, float* scratch) {
  switch (kv.dtype) {
    case DType::f32:
      return attention_row_typed<T, DType::f32>(q, n_heads, kv, n_ctx, scale, out, scratch);
    case DType::bf16:
      return attention_row_typed<T, DType::bf16>(q, n_heads, kv, n_ctx, scale, out, scratch);
    case DType::f16:
      return attention_row_typed<T, DType::f16>(q, n_heads, kv, n_ctx, scale, out, scratch);
  }
}

}  // namespace
}  // namespace vc::cpu

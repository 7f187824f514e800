// Two-pass softmax attention over explicit rows + a paged tail (portable C++;
// the loops over head_dim vectorise).
#include "kernels/cpu/attention_mixed.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/error.hpp"

namespace vc::cpu {

namespace {

float dot(const float* a, const float* b, size_t n) {
  float s = 0.f;
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Reads tail position `pos` of KV head g as fp32 into k, v.
void load_tail(const PagedKv& kv, size_t g, size_t pos, float* k, float* v) {
  const size_t bt = kv.block_tokens, D = kv.head_dim, esz = dtype_size(kv.dtype);
  const size_t block = size_t(kv.block_table[pos / bt]);
  const size_t off = (((block * kv.kv_heads + g) * bt) + pos % bt) * D * esz;
  to_f32(kv.dtype, static_cast<const char*>(kv.k) + off, k, D);
  to_f32(kv.dtype, static_cast<const char*>(kv.v) + off, v, D);
}

}  // namespace

void attention_row_mixed(const float* q, size_t n_heads, const DenseKvHead* prefix,
                         const PagedKv& tail, size_t tail_begin, size_t n_ctx, float scale,
                         float* out) {
  const size_t D = tail.head_dim, G = tail.kv_heads;
  if (G == 0 || n_heads % G != 0)
    throw Error("attention_row_mixed: query heads must be a multiple of KV heads");
  const size_t group = n_heads / G;
  const size_t n_tail = n_ctx > tail_begin ? n_ctx - tail_begin : 0;
  thread_local std::vector<float> tk, tv, scores;
  tk.resize(n_tail * D);
  tv.resize(n_tail * D);
  for (size_t g = 0; g < G; ++g) {
    for (size_t t = 0; t < n_tail; ++t) load_tail(tail, g, tail_begin + t, &tk[t * D], &tv[t * D]);
    const DenseKvHead& p = prefix[g];
    const size_t n = p.n + n_tail;
    if (n == 0) throw Error("attention_row_mixed: nothing to attend to");
    scores.resize(n);
    for (size_t hh = 0; hh < group; ++hh) {
      const size_t h = g * group + hh;
      const float* qh = q + h * D;
      float mx = -INFINITY;
      for (size_t i = 0; i < p.n; ++i) mx = std::max(mx, scores[i] = scale * dot(qh, p.k + i * D, D));
      for (size_t t = 0; t < n_tail; ++t)
        mx = std::max(mx, scores[p.n + t] = scale * dot(qh, &tk[t * D], D));
      float sum = 0.f;
      for (size_t i = 0; i < n; ++i) sum += scores[i] = std::exp(scores[i] - mx);
      float* o = out + h * D;
      std::fill(o, o + D, 0.f);
      for (size_t i = 0; i < n; ++i) {
        const float w = scores[i] / sum;
        const float* v = i < p.n ? p.v + i * D : &tv[(i - p.n) * D];
        for (size_t d = 0; d < D; ++d) o[d] += w * v[d];
      }
    }
  }
}

}  // namespace vc::cpu

// One layer's statistics at compression time (layer_stats): the observation
// window's attention is recomputed here from the window queries kept by the prefill
// (or verify) pass and this layer's keys, so the pass itself never needs the keys
// for it and nothing of size window x n_pos is held for more than one layer.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"

namespace vc {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("layer_stats: " + what);
}

// Rows' attention to positions [0, n) of the slice `kv`, summed per KV head of the
// slice: out [kv.kv_heads][window][n] (zero past each row's last visible position).
void window_attention(const PrefillStats& s, const LayerKv& kv, std::vector<float>& out) {
  const size_t n = kv.n_pos, D = kv.head_dim, G = kv.kv_heads, group = s.heads / s.kv_heads;
  const size_t W = s.window;
  out.assign(G * W * n, 0.f);
  if (n == 0) return;
  const float scale = float(1.0 / std::sqrt(double(D)));
  std::vector<float> w(n);
  for (size_t r = 0; r < W; ++r) {
    const size_t last = std::min(s.window_start + r, n - 1);  // last visible position
    for (size_t h = kv.first_head * group; h < (kv.first_head + G) * group; ++h) {
      const float* qh = s.window_query(kv.layer, r, h);
      const size_t g = h / group - kv.first_head;
      float mx = -INFINITY;
      for (size_t t = 0; t <= last; ++t) {
        const float* k = kv.k_at(g, t);
        float dot = 0.f;
        for (size_t d = 0; d < D; ++d) dot += qh[d] * k[d];
        w[t] = dot * scale;
        mx = std::max(mx, w[t]);
      }
      double sum = 0;
      for (size_t t = 0; t <= last; ++t) sum += w[t] = std::exp(w[t] - mx);
      float* row = &out[(g * W + r) * n];
      for (size_t t = 0; t <= last; ++t) row[t] += float(w[t] / sum);
    }
  }
}

}  // namespace

LayerStats layer_stats(const PrefillStats& s, const LayerKv& kv, StatsNeeds needs) {
  const size_t l = kv.layer, n = kv.n_pos, G = kv.kv_heads, g0 = kv.first_head;
  require(l < s.layers, "layer " + std::to_string(l) + " of " + std::to_string(s.layers));
  require(s.head_dim == kv.head_dim && g0 <= s.kv_heads && G <= s.kv_heads - g0,
          "PrefillStats (kv_heads, head_dim) do not match the layer's KV");
  require(s.kv_heads > 0 && s.heads % s.kv_heads == 0,
          "PrefillStats.heads must be a positive multiple of kv_heads");
  require(n <= s.n_pos, "the KV holds " + std::to_string(n) + " positions, the statistics " +
                            std::to_string(s.n_pos));
  const size_t group = s.heads / s.kv_heads;
  LayerStats out;
  out.heads = G * group;
  out.kv_heads = G;
  out.head_dim = s.head_dim;
  out.n_pos = n;
  const bool derived_acc = needs.accumulated && s.accumulated_from_window;
  if (needs.window || derived_acc) {
    require(s.window_queries.size() == s.layers * s.window * s.heads * s.head_dim,
            "PrefillStats.window_queries has the wrong size (window statistics not gathered?)");
    out.window = s.window;
    window_attention(s, kv, out.window_attention);
  }
  if (derived_acc) {
    out.accumulated_attention.assign(G * n, 0.f);
    for (size_t g = 0; g < G; ++g)
      for (size_t w = 0; w < out.window; ++w) {
        const float* row = out.window_row(g, w);
        float* acc = &out.accumulated_attention[g * n];
        for (size_t p = 0; p < n; ++p) acc[p] += row[p];
      }
  } else if (needs.accumulated) {
    require(s.accumulated_attention.size() == s.layers * s.kv_heads * s.n_pos,
            "PrefillStats.accumulated_attention has the wrong size (not gathered?)");
    for (size_t g = g0; g < g0 + G; ++g) {
      const float* acc = s.accumulated(l, g);
      out.accumulated_attention.insert(out.accumulated_attention.end(), acc, acc + n);
    }
  }
  if (!needs.window) {  // derived only for the sum: not part of what was asked
    out.window = 0;
    out.window_attention.clear();
  }
  if (needs.query_moments) {
    const size_t per_layer = s.heads * s.head_dim;
    require(s.query_mean.size() == s.layers * per_layer &&
                s.query_sq_mean.size() == s.layers * per_layer,
            "PrefillStats.query_mean/query_sq_mean have the wrong size (not gathered?)");
    // The query heads of the slice's KV heads.
    const long begin = long(l * per_layer + g0 * group * s.head_dim);
    const long end = begin + long(G * group * s.head_dim);
    out.query_mean.assign(s.query_mean.begin() + begin, s.query_mean.begin() + end);
    out.query_sq_mean.assign(s.query_sq_mean.begin() + begin, s.query_sq_mean.begin() + end);
  }
  if (needs.hidden) {
    require(s.hidden_outputs == s.kv_heads &&
                s.hidden_scores.size() == s.layers * s.hidden_outputs * s.n_pos,
            "PrefillStats.hidden_scores has the wrong size (hidden-state scores not gathered, or "
            "not one per KV head)");
    require(s.hidden_begin == 0, "PrefillStats.hidden_scores start at position " +
                                     std::to_string(s.hidden_begin) +
                                     ": the rows before it were not scored");
    for (size_t g = g0; g < g0 + G; ++g) {
      const float* h = s.hidden(l, g);
      out.hidden_scores.insert(out.hidden_scores.end(), h, h + n);
    }
  }
  return out;
}

}  // namespace vc

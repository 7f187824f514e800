// Attention weights recomputed from the cached keys (fp32, exact softmax) for the
// statistics only; the prefill's own attention is untouched.
#include "runtime/prefill_stats.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/forward.hpp"

namespace vc {

PrefillStatsCollector::PrefillStatsCollector(const ModelConfig& cfg, size_t n_pos,
                                             size_t window) {
  s_.layers = size_t(cfg.num_layers);
  s_.heads = size_t(cfg.num_heads);
  s_.kv_heads = size_t(cfg.num_kv_heads);
  s_.head_dim = size_t(cfg.head_dim);
  s_.n_pos = n_pos;
  s_.window = std::min(window, n_pos);
  s_.window_attention.assign(s_.layers * s_.kv_heads * s_.window * n_pos, 0.f);
  s_.accumulated_attention.assign(s_.layers * s_.kv_heads * n_pos, 0.f);
  s_.query_mean.assign(s_.layers * s_.heads * s_.head_dim, 0.f);
  s_.query_sq_mean.assign(s_.layers * s_.heads * s_.head_dim, 0.f);
  scale_ = float(1.0 / std::sqrt(double(cfg.head_dim)));
}

void PrefillStatsCollector::observe(size_t layer, std::span<const ForwardRow> rows,
                                    const float* q, const cpu::PagedKv& kv) {
  const size_t D = s_.head_dim, H = s_.heads, G = s_.kv_heads, group = H / G, n = s_.n_pos;
  if (rows.empty()) return;
  size_t max_pos = 0;
  for (const auto& r : rows) max_pos = std::max(max_pos, size_t(r.position));
  // The layer's keys up to the last row, as fp32 [pos][kv_heads * D].
  std::vector<float> keys((max_pos + 1) * G * D);
  const size_t bt = kv.block_tokens, esz = dtype_size(kv.dtype);
  for (size_t p = 0; p <= max_pos; ++p)
    for (size_t g = 0; g < G; ++g) {
      const size_t block = size_t(kv.block_table[p / bt]);
      const size_t off = (((block * kv.kv_heads + g) * bt) + p % bt) * D * esz;
      to_f32(kv.dtype, static_cast<const char*>(kv.k) + off, &keys[(p * G + g) * D], D);
    }

  std::vector<float> w(max_pos + 1);
  for (size_t m = 0; m < rows.size(); ++m) {
    const size_t pos = size_t(rows[m].position);
    if (pos >= n) continue;
    if (layer == 0) ++observed_rows_;
    for (size_t h = 0; h < H; ++h) {
      const float* qh = q + (m * H + h) * D;
      float* mean = &s_.query_mean[(layer * H + h) * D];
      float* sq = &s_.query_sq_mean[(layer * H + h) * D];
      for (size_t d = 0; d < D; ++d) {
        mean[d] += qh[d];
        sq[d] += qh[d] * qh[d];
      }
      const size_t g = h / group;
      float mx = -INFINITY;
      for (size_t t = 0; t <= pos; ++t) {
        const float* k = &keys[(t * G + g) * D];
        float s = 0.f;
        for (size_t d = 0; d < D; ++d) s += qh[d] * k[d];
        w[t] = s * scale_;
        mx = std::max(mx, w[t]);
      }
      double sum = 0;
      for (size_t t = 0; t <= pos; ++t) sum += w[t] = std::exp(w[t] - mx);
      float* acc = &s_.accumulated_attention[(layer * G + g) * n];
      for (size_t t = 0; t <= pos; ++t) acc[t] += float(w[t] / sum);
      if (pos + s_.window >= n) {
        float* row = &s_.window_attention[((layer * G + g) * s_.window + (pos + s_.window - n)) * n];
        for (size_t t = 0; t <= pos; ++t) row[t] += float(w[t] / sum);
      }
    }
  }
}

PrefillStats PrefillStatsCollector::finish() {
  const float inv = observed_rows_ > 0 ? 1.0f / float(observed_rows_) : 0.f;
  for (float& x : s_.query_mean) x *= inv;
  for (float& x : s_.query_sq_mean) x *= inv;
  return std::move(s_);
}

PrefillStats PrefillStatsCollector::trim(const PrefillStats& s, size_t query_limit,
                                        size_t n_cols) {
  PrefillStats t = s;
  n_cols = std::min(n_cols, s.n_pos);
  const size_t first_query = s.n_pos - s.window;  // query position of window row 0
  const size_t kept_rows =
      query_limit > first_query ? std::min(s.window, query_limit - first_query) : 0;
  t.n_pos = n_cols;
  t.window = kept_rows;
  t.window_attention.assign(s.layers * s.kv_heads * kept_rows * n_cols, 0.f);
  t.accumulated_attention.assign(s.layers * s.kv_heads * n_cols, 0.f);
  for (size_t l = 0; l < s.layers; ++l)
    for (size_t g = 0; g < s.kv_heads; ++g)
      for (size_t w = 0; w < kept_rows; ++w) {
        const float* src = s.window_row(l, g, w);
        float* dst = &t.window_attention[((l * s.kv_heads + g) * kept_rows + w) * n_cols];
        float* acc = &t.accumulated_attention[(l * s.kv_heads + g) * n_cols];
        for (size_t p = 0; p < n_cols; ++p) {
          dst[p] = src[p];
          acc[p] += src[p];
        }
      }
  return t;
}

}  // namespace vc

// The statistics of the prefill (and verify) pass. Accumulated attention re-scores
// the rows' queries against the layer's keys (fp32; each KV head's keys transposed
// once per layer and call, used for every row) and normalises each score with the
// softmax maximum and sum the prefill's own attention found for that row and head,
// so the probabilities are summed into the columns without storing a score matrix;
// the prefill's attention itself is untouched.
#include "runtime/prefill_stats.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_scores.hpp"
#include "kernels/error.hpp"
#include "runtime/forward.hpp"

namespace vc {

PrefillStatsCollector::PrefillStatsCollector(const ModelConfig& cfg, size_t n_pos,
                                             size_t window, StatsNeeds needs,
                                             cpu::ThreadPool* pool, const HiddenScorer* scorer,
                                             size_t hidden_from)
    : needs_(needs), pool_(pool), scorer_(scorer) {
  s_.layers = size_t(cfg.num_layers);
  s_.heads = size_t(cfg.num_heads);
  s_.kv_heads = size_t(cfg.num_kv_heads);
  s_.head_dim = size_t(cfg.head_dim);
  s_.n_pos = n_pos;
  if (needs.window) {
    s_.window = std::min(window, n_pos);
    s_.window_start = n_pos - s_.window;
    s_.window_queries.assign(s_.layers * s_.window * s_.heads * s_.head_dim, 0.f);
  }
  if (needs.accumulated) s_.accumulated_attention.assign(s_.layers * s_.kv_heads * n_pos, 0.f);
  if (needs.query_moments) {
    s_.query_mean.assign(s_.layers * s_.heads * s_.head_dim, 0.f);
    s_.query_sq_mean.assign(s_.layers * s_.heads * s_.head_dim, 0.f);
  }
  if (needs.hidden) {
    if (scorer == nullptr)
      throw Error("prefill statistics: the method scores hidden states but has no scorer "
                  "(for kvzap: no kvzap.safetensors was loaded)");
    s_.hidden_outputs = scorer->outputs();
    s_.hidden_begin = std::min(hidden_from, n_pos);
    s_.hidden_scores.assign(s_.layers * s_.hidden_outputs * (n_pos - s_.hidden_begin), 0.f);
  }
  scale_ = float(1.0 / std::sqrt(double(cfg.head_dim)));
}

void PrefillStatsCollector::observe_hidden(size_t layer, std::span<const ForwardRow> rows,
                                           const float* h, size_t dim) {
  if (!needs_.hidden || rows.empty()) return;
  const size_t O = s_.hidden_outputs, b = s_.hidden_begin, stride = s_.n_pos - b;
  scored_.resize(rows.size() * O);
  scorer_->score(layer, h, rows.size(), dim, scored_.data());
  for (size_t m = 0; m < rows.size(); ++m) {
    const size_t pos = size_t(rows[m].position);
    if (pos < b || pos >= s_.n_pos) continue;
    for (size_t o = 0; o < O; ++o)
      s_.hidden_scores[(layer * O + o) * stride + pos - b] = scored_[m * O + o];
  }
}

void PrefillStatsCollector::observe(size_t layer, std::span<const ForwardRow> rows,
                                    const float* q, const cpu::PagedKv* kv,
                                    const float* max_sum) {
  const size_t D = s_.head_dim, H = s_.heads, n = s_.n_pos;
  if (rows.empty()) return;
  for (size_t m = 0; m < rows.size(); ++m) {
    const size_t pos = size_t(rows[m].position);
    if (pos >= n) continue;
    if (layer == 0) ++observed_rows_;
    const float* qm = q + m * H * D;
    if (needs_.query_moments) {
      float* mean = &s_.query_mean[layer * H * D];
      float* sq = &s_.query_sq_mean[layer * H * D];
      for (size_t i = 0; i < H * D; ++i) {
        mean[i] += qm[i];
        sq[i] += qm[i] * qm[i];
      }
    }
    if (needs_.window && pos >= s_.window_start)
      std::copy_n(qm, H * D, &s_.window_queries[((layer * s_.window) + pos - s_.window_start) * H * D]);
  }
  if (needs_.accumulated) {
    if (kv == nullptr || max_sum == nullptr)
      throw Error("PrefillStatsCollector: accumulated attention needs the layer's keys and the "
                  "rows' softmax maxima and sums");
    accumulate(layer, rows, q, *kv, max_sum);
  }
}

void PrefillStatsCollector::accumulate(size_t layer, std::span<const ForwardRow> rows,
                                       const float* q, const cpu::PagedKv& kv,
                                       const float* max_sum) {
  const size_t D = s_.head_dim, H = s_.heads, G = s_.kv_heads, group = H / G, n = s_.n_pos;
  size_t max_pos = 0;
  std::vector<size_t> live;  // rows inside the prompt
  for (size_t m = 0; m < rows.size(); ++m) {
    const size_t pos = size_t(rows[m].position);
    if (pos >= n) continue;
    live.push_back(m);
    max_pos = std::max(max_pos, pos);
  }
  if (live.empty()) return;
  const size_t cols = max_pos + 1, M = live.size() * group;
  qg_.resize(M * D);
  len_.resize(M);
  row_max_.resize(M);
  row_inv_sum_.resize(M);
  for (size_t g = 0; g < G; ++g) {
    // KV head g's query heads of every row, [rows * group][D], scaled as the
    // attention scales them, with how far each sees and its softmax max and sum.
    for (size_t i = 0; i < live.size(); ++i) {
      const size_t m = live[i], pos = size_t(rows[m].position);
      for (size_t j = 0; j < group; ++j) {
        const size_t h = g * group + j, at = i * group + j;
        const float* qh = q + (m * H + h) * D;
        for (size_t d = 0; d < D; ++d) qg_[at * D + d] = qh[d] * scale_;
        len_[at] = pos + 1;
        row_max_[at] = max_sum[(m * H + h) * 2];
        row_inv_sum_[at] = 1.0f / max_sum[(m * H + h) * 2 + 1];
      }
    }
    // KV head g's keys up to the last row, transposed once for every row.
    cpu::transpose_keys(kv, g, cols, keys_t_, pool_);
    cpu::accumulate_attention_transposed(qg_.data(), D, M, keys_t_.data(), D, cols, len_.data(),
                                         row_max_.data(), row_inv_sum_.data(),
                                         &s_.accumulated_attention[(layer * G + g) * n], pool_);
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
  t.n_pos = std::min(n_cols, s.n_pos);
  const size_t kept_rows =
      query_limit > s.window_start ? std::min(s.window, query_limit - s.window_start) : 0;
  t.window = kept_rows;
  t.window_queries.clear();
  const size_t row = s.heads * s.head_dim;
  for (size_t l = 0; l < s.layers && kept_rows > 0; ++l) {
    const float* src = &s.window_queries[l * s.window * row];
    t.window_queries.insert(t.window_queries.end(), src, src + kept_rows * row);
  }
  t.accumulated_attention.clear();
  t.accumulated_from_window = true;
  t.hidden_scores.clear();  // they cover the pass's rows only
  t.hidden_outputs = 0;
  t.hidden_begin = 0;
  return t;
}

}  // namespace vc

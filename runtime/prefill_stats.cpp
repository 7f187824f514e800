// The statistics of the prefill (and verify) pass. Accumulated attention re-scores
// the rows' queries against the layer's keys (fp32, exact softmax with a float
// exp): scores by score_rows_transposed (each KV head's keys transposed once per
// layer and call, used for every row), the softmax and column sums by a vectorised kernel; the prefill's own
// attention is untouched.
#include "runtime/prefill_stats.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_scores.hpp"
#include "kernels/cpu/softmax_accumulate.hpp"
#include "kernels/error.hpp"
#include "runtime/forward.hpp"

namespace vc {

namespace {

// Query rows scored against the keys per matmul call: bounds the scores scratch
// (rows x group x positions floats).
constexpr size_t kRowsPerBlock = 32;

}  // namespace

PrefillStatsCollector::PrefillStatsCollector(const ModelConfig& cfg, size_t n_pos,
                                             size_t window, StatsNeeds needs,
                                             cpu::ThreadPool* pool)
    : needs_(needs), pool_(pool) {
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
  scale_ = float(1.0 / std::sqrt(double(cfg.head_dim)));
}

void PrefillStatsCollector::observe(size_t layer, std::span<const ForwardRow> rows,
                                    const float* q, const cpu::PagedKv* kv) {
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
    if (kv == nullptr)
      throw Error("PrefillStatsCollector: accumulated attention needs the layer's keys");
    accumulate(layer, rows, q, *kv);
  }
}

void PrefillStatsCollector::accumulate(size_t layer, std::span<const ForwardRow> rows,
                                       const float* q, const cpu::PagedKv& kv) {
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
  const size_t cols = max_pos + 1;
  for (size_t g = 0; g < G; ++g) {
    float* acc = &s_.accumulated_attention[(layer * G + g) * n];
    // KV head g's keys up to the last row, transposed once for every block of rows.
    cpu::transpose_keys(kv, g, cols, keys_t_, pool_);
    for (size_t b = 0; b < live.size(); b += kRowsPerBlock) {
      const size_t e = std::min(live.size(), b + kRowsPerBlock);
      // The block's queries of KV head g's query heads, [rows * group][D], and how
      // far each sees.
      size_t block_cols = 0;
      qg_.resize((e - b) * group * D);
      len_.resize((e - b) * group);
      for (size_t i = b; i < e; ++i) {
        const size_t m = live[i], pos = size_t(rows[m].position);
        block_cols = std::max(block_cols, pos + 1);
        for (size_t j = 0; j < group; ++j) {
          std::copy_n(q + (m * H + g * group + j) * D, D, &qg_[((i - b) * group + j) * D]);
          len_[(i - b) * group + j] = pos + 1;
        }
      }
      const size_t M = (e - b) * group;
      scores_.resize(M * block_cols);
      cpu::score_rows_transposed(qg_.data(), D, M, keys_t_.data(), D, block_cols, scores_.data(),
                                 pool_);
      cpu::softmax_accumulate(scores_.data(), M, block_cols, len_.data(), scale_, acc, pool_);
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
  return t;
}

}  // namespace vc

// Gathers the prompt statistics that some compressors need (kvtiers/compressor.hpp
// PrefillStats) while the prefill pass runs, only those the method asks for
// (StatsNeeds): the post-RoPE queries of the last window of positions, the
// per-channel moments of the queries, and the attention each position receives
// accumulated over every query (the only statistic that reads keys). The window's
// attention is computed later, one layer at a time, when the view is built
// (layer_stats).
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kvtiers/compressor.hpp"
#include "runtime/model/config.hpp"

namespace vc {

struct ForwardRow;

class PrefillStatsCollector {
 public:
  /// What a verify pass gathers: its rows' queries (the window) and their moments;
  /// a refold derives accumulated attention from the window rows (trim).
  static constexpr StatsNeeds kVerifyNeeds{.window = true, .accumulated = false,
                                           .query_moments = true};

  /// For a prompt of n_pos positions starting at position 0; window: observation
  /// window (the last `window` prompt positions); `needs`: what to gather. `pool`
  /// (may be nullptr) runs the accumulated attention. `scorer` runs on every row's
  /// input hidden states when needs.hidden (vc::Error when it is then null); the
  /// scores of positions [hidden_from, n_pos) are kept (PrefillStats::hidden_begin).
  PrefillStatsCollector(const ModelConfig& cfg, size_t n_pos, size_t window, StatsNeeds needs,
                        cpu::ThreadPool* pool = nullptr, const HiddenScorer* scorer = nullptr,
                        size_t hidden_from = 0);

  /// True when observe() needs the layer's KV (accumulated attention over all
  /// queries); otherwise it reads queries only and `kv` may be nullptr.
  [[nodiscard]] bool needs_keys() const { return needs_.accumulated; }
  /// True when the statistics need the query of every prompt position (accumulated
  /// attention, query moments): the prefill must then compute every position
  /// rather than map in another request's blocks.
  [[nodiscard]] bool needs_every_query() const {
    return needs_.accumulated || needs_.query_moments || needs_.hidden;
  }
  /// True when forward() must call observe_hidden() with each layer's input.
  [[nodiscard]] bool needs_hidden() const { return needs_.hidden; }
  /// Called by forward() for each layer with the rows' input hidden states after the
  /// attention RMSNorm, h [rows][dim]: runs the HiddenScorer on the rows and stores
  /// the outputs of those inside [hidden_from, n_pos) at their positions.
  void observe_hidden(size_t layer, std::span<const ForwardRow> rows, const float* h, size_t dim);

  /// Called by forward() for each layer once the rows' KV is stored; q holds the
  /// rows' post-RoPE queries [rows, heads * head_dim]; `kv` is the layer's KV the
  /// rows attend over (a sequence of the cache, or a verify pass's staging), at
  /// least positions [0, last row's position]; `max_sum` the rows' attention
  /// softmax maxima and sums [rows][heads][2] (AttentionRowState::max_sum); both
  /// nullptr allowed when !needs_keys().
  void observe(size_t layer, std::span<const ForwardRow> rows, const float* q,
               const cpu::PagedKv* kv, const float* max_sum);

  /// The observation window (prompt positions whose queries are kept); 0 when the
  /// window is not gathered.
  [[nodiscard]] size_t window() const { return s_.window; }

  /// The statistics, moments normalised (call after the whole prompt ran).
  [[nodiscard]] PrefillStats finish();

  /// Statistics of a verify pass restricted for re-compressing positions
  /// [0, n_cols): window rows of queries at positions >= query_limit (rejected
  /// drafts) go; the accumulated attention becomes the sum of the kept window rows'
  /// attention (accumulated_from_window). Query moments keep every row.
  [[nodiscard]] static PrefillStats trim(const PrefillStats& s, size_t query_limit,
                                         size_t n_cols);

 private:
  void accumulate(size_t layer, std::span<const ForwardRow> rows, const float* q,
                  const cpu::PagedKv& kv, const float* max_sum);

  PrefillStats s_;
  StatsNeeds needs_;
  cpu::ThreadPool* pool_ = nullptr;
  const HiddenScorer* scorer_ = nullptr;
  std::vector<float> scored_;       // scratch of observe_hidden()
  size_t observed_rows_ = 0;  // rows seen in layer 0 (for the moments' mean)
  float scale_ = 1.0f;
  std::vector<float> keys_t_, qg_, row_max_, row_inv_sum_;  // scratch of accumulate()
  std::vector<size_t> len_;
};

}  // namespace vc

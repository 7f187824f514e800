// Gathers the prompt statistics that some compressors need (kvtiers/compressor.hpp
// PrefillStats) while the prefill pass runs: attention of the last window of
// queries to every position, attention accumulated over all queries, and the
// per-channel moments of the queries.
#pragma once
#include <cstddef>
#include <span>

#include "kvtiers/compressor.hpp"
#include "kernels/cpu/attention.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/model/config.hpp"

namespace vc {

struct ForwardRow;

class PrefillStatsCollector {
 public:
  /// For a prompt of n_pos positions starting at position 0; window: observation
  /// window (the last `window` prompt positions).
  PrefillStatsCollector(const ModelConfig& cfg, size_t n_pos, size_t window);

  /// Called by forward() for each layer once the rows' KV is stored; q holds the
  /// rows' post-RoPE queries [rows, heads * head_dim]; `kv` is the layer's KV the
  /// rows attend over (a sequence of the cache, or a verify pass's staging).
  void observe(size_t layer, std::span<const ForwardRow> rows, const float* q,
               const cpu::PagedKv& kv);

  /// The observation window (prompt positions whose attention rows are kept).
  [[nodiscard]] size_t window() const { return s_.window; }

  /// The statistics, moments normalised (call after the whole prompt ran).
  [[nodiscard]] PrefillStats finish();

  /// Statistics of a verify pass restricted for re-compressing positions
  /// [0, n_cols): window rows of queries at positions >= query_limit (rejected
  /// drafts) go, and so do columns >= n_cols; the accumulated attention is re-summed
  /// over the kept window rows. Query moments keep every row.
  [[nodiscard]] static PrefillStats trim(const PrefillStats& s, size_t query_limit,
                                         size_t n_cols);

 private:
  PrefillStats s_;
  size_t observed_rows_ = 0;  // rows seen in layer 0 (for the moments' mean)
  float scale_ = 1.0f;
};

}  // namespace vc

// A request's hidden-state scores (KVzap's surrogate outputs) for every position
// verified so far: the prompt's come from the prefill pass, each verify pass adds
// those of the positions it commits. A view rebuilt over [0, n) (a fold) then ranks
// every position by the score it got when it was computed, so the view stays pruned
// by the surrogate as the request grows. Scores of a position never change: its
// hidden states are those of the verified tokens before it (full-KV decoding's).
#pragma once
#include <cstddef>
#include <vector>

#include "kvtiers/compressor.hpp"

namespace vc {

class HiddenScoreLog {
 public:
  HiddenScoreLog() = default;
  /// For a model of `layers` layers (heads, kv_heads, head_dim: its shape, copied
  /// into the statistics it makes) and `outputs` scores per position and layer.
  HiddenScoreLog(size_t layers, size_t heads, size_t kv_heads, size_t head_dim, size_t outputs);

  /// Positions [0, size()) are scored.
  [[nodiscard]] size_t size() const { return n_; }
  [[nodiscard]] bool empty() const { return layers_ == 0; }

  /// Appends positions [size(), size() + count): scores [layers][outputs][count].
  void append(const std::vector<float>& scores, size_t count);

  /// Statistics holding the scores of positions [0, n) (n <= size(); vc::Error
  /// otherwise), for re-compressing [0, n).
  [[nodiscard]] PrefillStats stats(size_t n) const;

 private:
  size_t layers_ = 0, outputs_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, n_ = 0;
  std::vector<std::vector<float>> rows_;  // [layers * outputs][positions]
};

/// The scores of positions [first, first + count) of `s` as HiddenScoreLog::append
/// takes them ([layers][outputs][count]); vc::Error when `s` does not hold them.
[[nodiscard]] std::vector<float> hidden_scores_of(const PrefillStats& s, size_t first, size_t count);

}  // namespace vc

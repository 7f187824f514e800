// HiddenScoreLog: per-position surrogate scores kept as a request grows.
#include "runtime/hidden_score_log.hpp"

#include <string>

#include "kernels/error.hpp"

namespace vc {

HiddenScoreLog::HiddenScoreLog(size_t layers, size_t heads, size_t kv_heads, size_t head_dim,
                               size_t outputs)
    : layers_(layers),
      outputs_(outputs),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      rows_(layers * outputs) {}

void HiddenScoreLog::append(const std::vector<float>& scores, size_t count) {
  if (scores.size() != layers_ * outputs_ * count)
    throw Error("HiddenScoreLog: " + std::to_string(scores.size()) + " scores for " +
                std::to_string(count) + " positions of " + std::to_string(layers_) + " x " +
                std::to_string(outputs_));
  for (size_t i = 0; i < rows_.size(); ++i)
    rows_[i].insert(rows_[i].end(), scores.begin() + long(i * count),
                    scores.begin() + long((i + 1) * count));
  n_ += count;
}

PrefillStats HiddenScoreLog::stats(size_t n) const {
  if (n > n_)
    throw Error("HiddenScoreLog: scores of " + std::to_string(n) + " positions asked, " +
                std::to_string(n_) + " are held");
  PrefillStats s;
  s.layers = layers_, s.heads = heads_, s.kv_heads = kv_heads_, s.head_dim = head_dim_;
  s.n_pos = n;
  s.hidden_outputs = outputs_;
  s.hidden_scores.reserve(rows_.size() * n);
  for (const auto& r : rows_) s.hidden_scores.insert(s.hidden_scores.end(), r.begin(), r.begin() + long(n));
  return s;
}

std::vector<float> hidden_scores_of(const PrefillStats& s, size_t first, size_t count) {
  const size_t stride = s.n_pos - s.hidden_begin;
  if (first < s.hidden_begin || first + count > s.n_pos ||
      s.hidden_scores.size() != s.layers * s.hidden_outputs * stride)
    throw Error("hidden_scores_of: positions " + std::to_string(first) + "+" +
                std::to_string(count) + " are not among the scored positions [" +
                std::to_string(s.hidden_begin) + ", " + std::to_string(s.n_pos) + ")");
  std::vector<float> out;
  out.reserve(s.layers * s.hidden_outputs * count);
  for (size_t i = 0; i < s.layers * s.hidden_outputs; ++i) {
    const float* row = &s.hidden_scores[i * stride + (first - s.hidden_begin)];
    out.insert(out.end(), row, row + count);
  }
  return out;
}

}  // namespace vc

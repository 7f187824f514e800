#include "kvtiers/kv_mirror.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace vc {

KvMirror::KvMirror(const PagedKvCache& cache)
    : cache_(&cache), alive_(cache.lifetime()), num_blocks_(cache.config().num_blocks),
      copied_(cache.config().num_layers * num_blocks_, 0),
      held_(cache.config().num_layers * num_blocks_, 0) {}

void KvMirror::check_layer(size_t layer) const {
  if (expired()) throw Error("KvMirror: its cache is gone");
  if (layer >= cache_->config().num_layers)
    throw Error("KvMirror: layer " + std::to_string(layer) + " of a cache of " +
                std::to_string(cache_->config().num_layers));
}

std::vector<std::pair<int32_t, int32_t>> KvMirror::stale(size_t layer,
                                                         std::span<const int32_t> blocks) {
  check_layer(layer);
  const std::span<const uint32_t> writes = cache_->write_counts(layer);
  uint32_t* copied = copied_.data() + layer * num_blocks_;
  uint8_t* held = held_.data() + layer * num_blocks_;
  scratch_.clear();
  for (const int32_t b : blocks) {
    if (b < 0) continue;
    if (size_t(b) >= num_blocks_)
      throw Error("KvMirror: block " + std::to_string(b) + " of a cache of " +
                  std::to_string(num_blocks_));
    if (held[b] != 0 && copied[b] == writes[size_t(b)]) continue;
    held[b] = 1;
    copied[b] = writes[size_t(b)];
    scratch_.push_back(b);
  }
  std::sort(scratch_.begin(), scratch_.end());
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (const int32_t b : scratch_) {  // repeats were marked current at their first sight
    if (!runs.empty() && runs.back().first + runs.back().second == b) ++runs.back().second;
    else runs.emplace_back(b, 1);
  }
  return runs;
}

void KvMirror::wrote_through(size_t layer, std::span<const int32_t> written) {
  check_layer(layer);
  const std::span<const uint32_t> writes = cache_->write_counts(layer);
  uint32_t* copied = copied_.data() + layer * num_blocks_;
  const uint8_t* held = held_.data() + layer * num_blocks_;
  scratch_.assign(written.begin(), written.end());
  std::sort(scratch_.begin(), scratch_.end());
  for (size_t i = 0; i < scratch_.size();) {
    size_t j = i + 1;
    while (j < scratch_.size() && scratch_[j] == scratch_[i]) ++j;
    const int32_t b = scratch_[i];
    const auto n = uint32_t(j - i);
    i = j;
    if (b < 0) continue;
    if (size_t(b) >= num_blocks_)
      throw Error("KvMirror: block " + std::to_string(b) + " of a cache of " + std::to_string(num_blocks_));
    // Current before these n writes: its count then was the cache's count less n.
    if (held[b] != 0 && copied[b] + n == writes[size_t(b)]) copied[b] = writes[size_t(b)];
  }
}

}  // namespace vc

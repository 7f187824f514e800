// A copy of a PagedKvCache kept elsewhere (a GPU's memory, under --device cuda)
// stays current block by block: before a pass reads blocks through the copy, the
// mirror names those a write() changed since they were last copied (by the cache's
// per-block write counts), and only those are copied again. A decode step then
// copies each sequence's newest block, not its whole context.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"

namespace vc {

class KvMirror {
 public:
  explicit KvMirror(const PagedKvCache& cache);
  /// True once the cache is gone: the copy can be dropped.
  [[nodiscard]] bool expired() const { return alive_.expired(); }
  /// Of the physical blocks in `blocks` (block tables; -1 entries and repeats
  /// skipped), those whose layer-`layer` contents the copy lacks -- never copied,
  /// or written since -- as runs (first block, count) of consecutive ids in
  /// ascending order. The caller copies them before the pass reads the copy; they
  /// count as current from this call on.
  [[nodiscard]] std::vector<std::pair<int32_t, int32_t>> stale(size_t layer,
                                                               std::span<const int32_t> blocks);
  /// The copy took, itself, the writes of layer `layer` named by `written` (one
  /// entry per write, its physical block; -1 entries skipped), the same writes the
  /// cache took last: a block that was current before them is current again; one
  /// that was not stays stale (it is copied whole on its next read).
  void wrote_through(size_t layer, std::span<const int32_t> written);

 private:
  /// Throws once the cache is gone, or for a layer it does not have.
  void check_layer(size_t layer) const;
  const PagedKvCache* cache_;
  std::weak_ptr<const void> alive_;
  size_t num_blocks_;
  std::vector<uint32_t> copied_;  // [layers][blocks]: the write count when last copied
  std::vector<uint8_t> held_;     // [layers][blocks]: copied at least once
  std::vector<int32_t> scratch_;
};

}  // namespace vc

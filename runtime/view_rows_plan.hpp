// Draft rows over compressed views, laid out for an attention backend
// (AttentionBackend::attend_views): the kept rows each (row, KV head) reads, listed
// once per distinct (view, head), and the paged tails' block tables. Only views whose
// kept rows are held as plain rows in the cache's element type (token dropping) are
// planned; quantized or transformed ones attend on the CPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"

namespace vc {

class CompressedView;

struct ViewRowsPlan {
  /// One (view, KV head)'s kept rows of the layer, as the view holds them (host):
  /// k, v: [rows, head_dim] in the cache's dtype; null when it kept none.
  struct Prefix {
    const void* k = nullptr;
    const void* v = nullptr;
    size_t rows = 0;
  };
  std::vector<Prefix> prefixes;      // distinct (view, KV head) pairs
  std::vector<int32_t> prefix_of;    // [M * kv_heads]: index into prefixes
  std::vector<int32_t> tail_begin;   // [M]: the row's view.covered()
  size_t table_stride = 1;
  std::vector<int32_t> tables;       // [M, table_stride]: the tails' blocks (0 below a tail)
  std::vector<int32_t> tail_blocks;  // every block a tail reads (for a copy of the cache)
  size_t max_entries = 0;            // kept rows + tail positions, the most of any (row, head)
};

/// The plan of M draft rows of layer `layer`: row m attends over views[m] and then
/// positions [views[m]->covered(), n_ctx[m]) of seqs[m] in `cache`. nullopt when a
/// view holds some head of the layer otherwise than as plain rows in the cache's
/// dtype. Throws vc::Error when a tail reads a block its sequence does not hold.
[[nodiscard]] std::optional<ViewRowsPlan> plan_view_rows(const PagedKvCache& cache, size_t layer,
                                                         std::span<const CompressedView* const> views,
                                                         std::span<const KvSequence* const> seqs,
                                                         std::span<const int32_t> n_ctx);

}  // namespace vc

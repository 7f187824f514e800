// Draft rows over compressed views, laid out for an attention backend
// (AttentionBackend::attend_views): the kept rows each (row, KV head) reads, listed
// once per distinct (view, head), and the paged tails' block tables. Kept rows held
// as plain rows in the cache's element type (token dropping) are listed in place;
// others as the compressed tier packs them (quantized codes with their scales and
// zeros, bf16 rows, outliers, RoPE or Hadamard: KIVI, KVQuant, RotateKV), for the
// backend to dequantize as PackedSide::decode does. Views of an undescribed codec
// (fp32 values only) are not planned: their rows attend on the CPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtiers/packed_kv.hpp"
#include "kvtiers/paged_kv_cache.hpp"

namespace vc {

class CompressedView;

struct ViewRowsPlan {
  /// One (view, KV head)'s kept rows of the layer, as the view holds them (host):
  /// k, v: [rows, head_dim] in the cache's dtype; null when it kept none.
  struct Prefix {
    const CompressedView* view = nullptr;  // whose kept rows these are (its id() names them)
    size_t head = 0;                       // which KV head of plan.layer
    const void* k = nullptr;
    const void* v = nullptr;
    size_t rows = 0;
    /// Or, with k and v null and rows > 0, the two sides as stored; a side's
    /// transform reads `positions` (rows of them, absolute: RoPE) and
    /// `rope_inv_freq` (head_dim / 2; null unless a side is stored before RoPE).
    const PackedSide* k_side = nullptr;
    const PackedSide* v_side = nullptr;
    const int32_t* positions = nullptr;
    const float* rope_inv_freq = nullptr;
    [[nodiscard]] bool packed() const { return k_side != nullptr; }
  };
  size_t layer = 0;
  std::vector<Prefix> prefixes;      // distinct (view, KV head) pairs
  std::vector<int32_t> prefix_of;    // [M * kv_heads]: index into prefixes
  std::vector<int32_t> tail_begin;   // [M]: the row's view.covered()
  size_t table_stride = 1;
  std::vector<int32_t> tables;       // [M, table_stride]: the tails' blocks (0 below a tail)
  std::vector<int32_t> tail_blocks;  // every block a tail reads (for a copy of the cache)
  size_t max_entries = 0;            // kept rows + tail positions, the most of any (row, head)
  int32_t max_rope_position = -1;    // the largest position a side stored before RoPE reads
  const float* rope_inv_freq = nullptr;  // those sides' frequencies (one set for the plan)
};

/// The plan of M draft rows of layer `layer`: row m attends over views[m] and then
/// positions [views[m]->covered(), n_ctx[m]) of seqs[m] in `cache`. nullopt when a
/// view holds some head of the layer in a form no backend reads (fp32 values of an
/// undescribed codec; a Hadamard side whose head_dim is not a power of two; a RoPE
/// side without its frequencies, or with other ones than another view's; outliers
/// out of order). Throws vc::Error when a tail reads a block its
/// sequence does not hold, or a side's arrays are not the sizes its rows need.
[[nodiscard]] std::optional<ViewRowsPlan> plan_view_rows(const PagedKvCache& cache, size_t layer,
                                                         std::span<const CompressedView* const> views,
                                                         std::span<const KvSequence* const> seqs,
                                                         std::span<const int32_t> n_ctx);

}  // namespace vc

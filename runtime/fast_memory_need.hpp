// What one request can hold in fast memory at most, for admission by memory: the
// scheduler reserves it before the request starts, so an admitted request's charges
// (kvtiers/fast_memory.hpp) fit the budget.
#pragma once
#include <cstddef>
#include <string>

#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/draft_batcher.hpp"

namespace vc {

/// The fast-memory bound of one request, with its parts for messages.
struct FastNeed {
  size_t view = 0;     // compressed view (lossy, vericache), as held
  size_t blocks = 0;   // paged blocks: the whole KV (full) or the tail
  size_t staging = 0;  // whole-layer staging its statistics need beyond the shared chunks
  [[nodiscard]] size_t total() const { return view + blocks + staging; }
  /// "view 1.2 MB + blocks 0.3 MB" for messages.
  [[nodiscard]] std::string describe() const;
};

/// An upper bound of what `spec` holds in fast memory over its life:
///   full:      every position of prompt + max_new_tokens + 1 in blocks;
///   lossy:     the view of the prompt + the blocks of the tail (max_new_tokens + 1);
///   vericache: the view of prompt + max_new_tokens positions + a tail of at most
///              fold_every + 2 (max_draft + 1) positions and never past
///              prompt + max_new_tokens + max_draft + 1 (the bound without folding),
///              in whole blocks;
/// plus whole-layer staging when the method's statistics read every key of a layer.
/// A view is bounded by 1.1x its method's budget (full bytes / ratio), or by what
/// the method says it stores (Compressor::stored_bytes_bound) when that is more:
/// a composition whose quantizer is told to keep more bits than the ratio allows;
/// a method that keeps every position (the quantizers) is bounded by what it says
/// alone, which is exact. Plus 4 bytes of position per kept row (8 where keys are
/// stored before RoPE: the absolute positions too); once per position for a method
/// that keeps every position, whose heads share one list.
[[nodiscard]] FastNeed fast_memory_need(const DraftSpec& spec, const KvCacheConfig& kv,
                                        size_t max_draft);

/// Bytes of the paged blocks `positions` more tail positions can take wherever
/// they start (one block more than they fill): the compressed-first flow's suffix,
/// which sits in the tail instead of the view.
[[nodiscard]] size_t tail_blocks_bytes(const KvCacheConfig& kv, size_t positions);

/// Fast memory an engine holds whatever runs: the staging buffers of its verify
/// streamers (one per lane: requests that can share a verify pass) and its prefill
/// streamer (two chunks of `stage_positions` each).
[[nodiscard]] size_t engine_fast_overhead(const KvCacheConfig& kv, size_t stage_positions,
                                          size_t verify_lanes = 1);

}  // namespace vc

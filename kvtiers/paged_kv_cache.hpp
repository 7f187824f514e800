// A paged KV cache: every layer's K and V in fixed-size blocks of tokens, shared
// block ids across layers, one block table per sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/dtype.hpp"
#include "kvtiers/block_pool.hpp"

namespace vc {

struct KvCacheConfig {
  size_t num_layers = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t block_tokens = 16;
  size_t num_blocks = 0;       // capacity in blocks (shared by all sequences)
  DType dtype = DType::bf16;   // storage type of K and V (bf16 default, f32 selectable)
};

/// One sequence's view of the cache: its block table and how many positions hold KV.
struct KvSequence {
  std::vector<int32_t> blocks;  // logical block j -> physical block (-1: released prefix)
  size_t length = 0;            // positions [0, length) are written
};

/// Storage, per layer: k, v: [num_blocks, kv_heads, block_tokens, head_dim] in dtype,
/// page-aligned. A physical block id means the same slot in every layer.
class PagedKvCache {
 public:
  explicit PagedKvCache(const KvCacheConfig& cfg);
  ~PagedKvCache();
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  [[nodiscard]] const KvCacheConfig& config() const { return cfg_; }
  [[nodiscard]] BlockPool& pool() { return pool_; }

  /// Allocates blocks so that `seq` can hold `positions` tokens.
  void reserve(KvSequence& seq, size_t positions);
  /// Stores one position's K and V for one layer: k_row, v_row: [kv_heads, head_dim]
  /// fp32, rounded to the storage type. The position must be reserved. Sets
  /// seq.length to at least pos + 1.
  void write(size_t layer, KvSequence& seq, size_t pos, const float* k_row, const float* v_row);
  /// Reads one position's K and V back as fp32 ([kv_heads, head_dim] each).
  void read(size_t layer, const KvSequence& seq, size_t pos, float* k_row, float* v_row) const;
  /// Drops positions >= `length` (rollback), releasing whole blocks past it.
  void truncate(KvSequence& seq, size_t length);
  /// Releases every block of `seq`.
  void free(KvSequence& seq);
  /// Releases the blocks that lie wholly below position `upto` (their table entries
  /// become -1): a drafter whose compressed view now covers them keeps only its tail.
  /// Positions below `upto` must not be read or written afterwards.
  void release_prefix(KvSequence& seq, size_t upto);
  /// Raw view of one layer for the attention kernel (valid until the table changes).
  [[nodiscard]] cpu::PagedKv view(size_t layer, const KvSequence& seq) const;

  /// Bytes of K+V per token over all layers.
  [[nodiscard]] size_t bytes_per_token() const;
  /// Bytes of K+V held by `seq` (its written positions).
  [[nodiscard]] size_t bytes_of(const KvSequence& seq) const { return seq.length * bytes_per_token(); }

 private:
  [[nodiscard]] size_t slot_offset(const KvSequence& seq, size_t pos, size_t head) const;
  KvCacheConfig cfg_;
  BlockPool pool_;
  size_t layer_bytes_ = 0;  // bytes of K (or V) for one layer
  std::byte* storage_ = nullptr;  // [num_layers][2 (K, V)][layer_bytes_]
  size_t storage_bytes_ = 0;
};

}  // namespace vc

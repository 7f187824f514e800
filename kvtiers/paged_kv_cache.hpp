// A paged KV cache: every layer's K and V in fixed-size blocks of tokens, shared
// block ids across layers, one block table per sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/dtype.hpp"
#include "kvtiers/block_pool.hpp"
#include "kvtiers/fast_memory.hpp"

namespace vc {

/// Positions per paged KV block unless a config says otherwise. 64 rather than 16:
/// a block's fixed attention work (softmax, merge into the running state) is paid
/// four times less often (full attention 23-27% faster at 4K-16K on the 1B shape).
inline constexpr size_t kDefaultBlockTokens = 64;
/// The largest block a config may ask for.
inline constexpr size_t kMaxBlockTokens = 4096;

struct KvCacheConfig {
  size_t num_layers = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  size_t block_tokens = kDefaultBlockTokens;
  size_t num_blocks = 0;       // capacity in blocks (shared by all sequences)
  DType dtype = DType::bf16;   // storage type of K and V (bf16 default, f32 selectable)
  bool prefix_sharing = true;  // sequences with a common prompt prefix share its blocks
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
  /// Charges every block this cache hands out (and returns it when the block is
  /// free again) to `budget` (may be null: uncounted). Set before any allocation.
  void set_budget(FastMemory* budget) { budget_ = budget; }
  /// Bytes of one block over all layers (K and V).
  [[nodiscard]] size_t block_bytes() const { return cfg_.block_tokens * bytes_per_token(); }
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
  /// Starts the empty `seq` at position `n`: positions [0, n) are held elsewhere
  /// (a compressed view over a full tier) and are never read or written here; the
  /// blocks wholly below n are -1 and the next reserve() allocates from n on.
  void start_at(KvSequence& seq, size_t n);
  /// Prefix sharing. Maps into the empty `seq` the leading full blocks of `tokens`
  /// that a live sequence already published (the same tokens at the same positions:
  /// the same KV bits, since prefill is batch invariant), taking a reference on each;
  /// at most `limit` positions. Returns the positions shared (whole blocks). Shared
  /// blocks are never written: sequences only write past their prompt.
  size_t share_prefix(KvSequence& seq, std::span<const int32_t> tokens, size_t limit);
  /// Publishes the full blocks of `seq` that hold `tokens` (its first positions).
  void publish_prefix(const KvSequence& seq, std::span<const int32_t> tokens);
  /// Blocks currently published for sharing.
  [[nodiscard]] size_t published_blocks() const { return published_.size(); }

  /// Raw view of one layer for the attention kernel (valid until the table changes).
  [[nodiscard]] cpu::PagedKv view(size_t layer, const KvSequence& seq) const;

  /// Copies of the cache elsewhere (a GPU's memory: runtime/kv_mirror.hpp) keep
  /// themselves current by these. A number no other cache of this process has.
  [[nodiscard]] uint64_t id() const { return id_; }
  /// Per physical block, how many writes layer `layer` has taken: a block whose
  /// count moved since a copy was taken has changed (write() is the only writer).
  [[nodiscard]] std::span<const uint32_t> write_counts(size_t layer) const {
    return {writes_.data() + layer * cfg_.num_blocks, cfg_.num_blocks};
  }
  /// Expires when the cache is destroyed.
  [[nodiscard]] std::weak_ptr<const void> lifetime() const { return alive_; }

  /// Bytes of K+V per token over all layers.
  [[nodiscard]] size_t bytes_per_token() const;
  /// Bytes of K+V held by `seq` (its written positions).
  [[nodiscard]] size_t bytes_of(const KvSequence& seq) const { return seq.length * bytes_per_token(); }

 private:
  [[nodiscard]] size_t slot_offset(const KvSequence& seq, size_t pos, size_t head) const;
  /// Drops one reference; a block that becomes free leaves the prefix index.
  void release_block(int32_t block);
  [[nodiscard]] static uint64_t prefix_key(int32_t parent, std::span<const int32_t> tokens);

  struct Published {
    int32_t parent = -1;          // the block before it in its sequence (-1: first)
    std::vector<int32_t> tokens;  // the tokens it holds
    uint64_t key = 0;
  };
  std::unordered_map<int32_t, Published> published_;       // block -> what it holds
  std::unordered_multimap<uint64_t, int32_t> prefix_index_;  // key(parent, tokens) -> block
  KvCacheConfig cfg_;
  BlockPool pool_;
  FastMemory* budget_ = nullptr;
  size_t layer_bytes_ = 0;  // bytes of K (or V) for one layer
  std::byte* storage_ = nullptr;  // [num_layers][2 (K, V)][layer_bytes_]
  size_t storage_bytes_ = 0;
  uint64_t id_;
  std::vector<uint32_t> writes_;  // [num_layers][num_blocks]: write() calls per block
  std::shared_ptr<const void> alive_ = std::make_shared<int>(0);
};

}  // namespace vc

// Causal attention of one query row over a paged KV cache (GQA).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/dtype.hpp"

namespace vc::cpu {

struct QuantSideBlock;  // dequant_attention.hpp

/// One layer's paged KV as raw pointers.
/// k, v: [num_blocks, kv_heads, block_tokens, head_dim] in `dtype`.
/// block_table[j]: physical block of logical block j (positions j*block_tokens ..).
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::bf16;
  size_t block_tokens = 0;
  size_t kv_heads = 0;
  size_t head_dim = 0;
  const int32_t* block_table = nullptr;
};

/// Below this many positions one thread finishes a row's attention before a
/// hand-off to a pool would pay off.
inline constexpr size_t kMinParallelPositions = 512;

/// out[h, :] = softmax(scale * q[h] · K[kvh, 0..n_ctx)) · V[kvh, 0..n_ctx) for each
/// query head h < n_heads, with kvh = h / (n_heads / kv_heads).
/// q, out: [n_heads, head_dim] fp32.
///
/// Batch invariance: the result depends only on q and the first n_ctx positions of
/// the cache. The reduction over positions runs in chunks fixed by absolute position
/// (one chunk per KV block), each chunk's (max, sum, weighted V) merged in position
/// order with the online-softmax rule, so it never depends on how many query rows
/// are computed in the same pass.
void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out);

/// As above, with the KV heads (each with its query heads) split across `pool`
/// threads when the context is long enough to pay for the hand-off; bit-identical
/// to the single-threaded call. `pool` may be nullptr. With `max_sum` ([n_heads][2]),
/// each head's softmax maximum and sum (of the scaled scores) are written there too.
void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out, ThreadPool* pool, float* max_sum = nullptr);

/// Rows whose query heads on one KV head share a pass of AttentionRowState::add_rows
/// on the active SIMD path (1: each row alone, as when a KV head has as many
/// query heads as a pass takes).
[[nodiscard]] size_t attention_rows_per_pass(size_t n_heads, size_t kv_heads);
/// The most attention_rows_per_pass returns.
inline constexpr size_t kAttentionMaxRowsPerPass = 4;

/// attention_row split over calls, for KV that arrives in chunks of blocks (a verify
/// or prefill pass staging the full KV a chunk at a time): begin(), then add() for
/// consecutive block ranges in ascending order starting at block 0, then finish().
/// The result is bit-identical to attention_row over the union of the ranges: every
/// block's arithmetic and the merge order depend only on the block's position.
/// Each add() may see a different PagedKv (another staging buffer) as long as the
/// shape is the same and its block table maps the added blocks.
class AttentionRowState {
 public:
  /// q: [n_heads, head_dim]; n_ctx: positions the row attends to (its position + 1).
  void begin(const float* q, size_t n_heads, const PagedKv& shape, size_t n_ctx, float scale);
  /// Merges blocks [block_begin, block_end) of `kv` (clipped to the row's context).
  /// block_begin must be where the previous add() ended (0 first). With `pool`, the
  /// KV heads are split across its threads (bit-identical either way).
  void add(const PagedKv& kv, size_t block_begin, size_t block_end, ThreadPool* pool = nullptr);
  /// add() for several rows of one sequence at once (each begun over KV of this
  /// shape, each at block_begin): over the blocks whole for every row, a KV head's
  /// query heads of several rows share one pass (attention_rows_per_pass), each K
  /// and V vector loaded once for all of them; the rest row by row. Each row's bits
  /// are those of its own add() over the same blocks.
  static void add_rows(std::span<AttentionRowState* const> rows, const PagedKv& kv,
                       size_t block_begin, size_t block_end);
  /// Merges the next block from K and V rows held as quantized codes, dequantized in
  /// registers (dequant_attention.hpp): the bits of add() over the same block's
  /// dequantized fp32 rows. States of one KV head only.
  void add_quantized(const QuantSideBlock& k, const QuantSideBlock& v);
  /// The same with the block's K rows given as fp32 (k_rows: [valid rows][head_dim],
  /// decoded by the caller) and V from its codes.
  void add_quantized_v(const float* k_rows, const QuantSideBlock& v);
  /// out: [n_heads, head_dim]. Every block of the context must have been added.
  void finish(float* out) const;
  /// out: [n_heads][2], each head's softmax maximum and sum over the blocks added so
  /// far (after the last add(), the row's own: what finish() divides by).
  void max_sum(float* out) const;
  /// Query heads of the row (begin()'s n_heads).
  [[nodiscard]] size_t heads() const { return n_heads_; }
  /// Blocks the row attends to: ceil(n_ctx / block_tokens).
  [[nodiscard]] size_t blocks() const { return n_blocks_; }

 private:
  /// Throws vc::Error (from AttentionRowState::fn) when `kv` has no K, V or block
  /// table, or maps a block of [block_begin, block_end) to a negative slot.
  static void check_blocks(const char* fn, const PagedKv& kv, size_t block_begin, size_t block_end);
  /// Valid rows of the next block, after checking an add_quantized* may add it.
  [[nodiscard]] size_t next_quantized_block(const char* fn) const;

  std::vector<float> state_;
  size_t n_heads_ = 0, kv_heads_ = 0, head_dim_ = 0, block_tokens_ = 0, n_ctx_ = 0;
  size_t n_blocks_ = 0, next_block_ = 0;
};

}  // namespace vc::cpu

// The decoder forward pass over a paged KV cache, for any mix of rows: a prefill
// chunk (one sequence, many positions), a decode step (many sequences, one position
// each) or a verify pass (one sequence, L+1 positions).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/model.hpp"

namespace vc {

class PrefillStatsCollector;

/// One staged chunk of a layer's KV: blocks [block_begin, block_end) addressed by
/// absolute block index through kv.block_table.
struct KvChunk {
  cpu::PagedKv kv;
  size_t block_begin = 0, block_end = 0;
  /// Set when kv's blocks are the tier's own memory (borrowed in place, not staged):
  /// they stay valid and unchanged while this is held, after release() too, so a
  /// device may copy them asynchronously (AttentionBackend::Pass::add).
  std::shared_ptr<const void> keep;
};

/// Where a pass's KV lives when it is not a PagedKvCache: a verify (or streamed
/// prefill) pass attends over the full KV streamed in from a full tier, one chunk
/// of blocks at a time. forward() calls, per layer: write for every row's new K/V,
/// then acquire / release for chunks 0 .. chunks()-1 in order, attending over each.
/// Chunks cover every block up to the last row's position; the rows' own K/V
/// appear in the chunks that hold their positions.
class LayerKvProvider {
 public:
  virtual ~LayerKvProvider() = default;
  /// k_row, v_row: [kv_heads, head_dim] fp32, stored with the tier's rounding.
  virtual void write(size_t layer, size_t pos, const float* k_row, const float* v_row) = 0;
  /// Chunks per layer of the current pass.
  [[nodiscard]] virtual size_t chunks() const = 0;
  /// Waits until chunk c of `layer` is staged and returns it.
  [[nodiscard]] virtual KvChunk acquire(size_t layer, size_t c) = 0;
  /// The pass is done with chunk c of `layer` (its buffer may be reused).
  virtual void release(size_t layer, size_t c) = 0;
  /// The KV's shape (dtype, block_tokens, kv_heads, head_dim; no data).
  [[nodiscard]] virtual cpu::PagedKv shape() const = 0;
};

/// Rows [begin, end) of a pass whose KV `provider` holds (one sequence's
/// consecutive positions).
struct ProvidedRows {
  LayerKvProvider* provider = nullptr;
  size_t begin = 0, end = 0;
};

/// One token to run. Rows of one sequence must be consecutive positions in
/// increasing order; its earlier positions must already be in the cache.
struct ForwardRow {
  int32_t token = 0;
  int32_t position = 0;
  KvSequence* seq = nullptr;
  bool want_logits = false;
  /// Draft rows: attend over this compressed view for positions [0, covered()) and
  /// over `seq`'s own cache for later positions, instead of `seq` alone.
  const CompressedView* view = nullptr;
};

/// Scratch buffers and the thread pool of one caller. Not thread-safe: one per
/// thread (or actor) that runs forward passes.
class Workspace {
 public:
  /// threads <= 0: pick from the hardware (see default_thread_count()).
  explicit Workspace(int threads = 0);
  [[nodiscard]] cpu::ThreadPool& pool() { return *pool_; }
  [[nodiscard]] int threads() const { return pool_->threads(); }

  std::vector<float> x, h, q, k, v, attn, gate, up, bias;
  std::vector<int32_t> positions;
  std::vector<cpu::AttentionRowState> attn_states;  // per row, passes over a provider
  std::vector<float> attn_max_sum;  // per row and head, softmax (max, sum), for stats
  // A model on a device: the rows it attends for, their context lengths, and their
  // queries and outputs gathered.
  std::vector<size_t> device_rows;
  std::vector<int32_t> device_ctx;
  std::vector<const KvSequence*> device_seqs;
  std::vector<const CompressedView*> device_views;
  std::vector<float> device_q, device_out;
  /// When set, forward() reports every layer's queries to it (prefill statistics).
  PrefillStatsCollector* stats = nullptr;
  /// Set while the passes run a prompt's rows (PromptRows): a model's LinearBackend
  /// then takes their products through linear_prompt (a faster kernel for many rows,
  /// with bits of its own). prefill(), prefill_to_tier() and the drafter's pass over
  /// a fetched prefix set it; decode, draft and verify passes never do.
  bool prompt_rows = false;
  /// When not empty, every row's KV goes to the provider of its range and attention
  /// reads from there instead of the cache (`seq` is ignored). The ranges cover the
  /// rows in order; several ranges batch several sequences' verify passes into one
  /// forward (each attends over its own provider; no statistics then).
  std::vector<ProvidedRows> providers;
  /// One provider for every row of `rows_in_pass` rows.
  void use_provider(LayerKvProvider& p, size_t rows_in_pass) { providers.assign(1, {&p, 0, rows_in_pass}); }
  /// Called before each chunk of a prompt's prefill (prefill(), prefill_to_tier(),
  /// the drafter's pass over a fetched prefix), through between_prefill_chunks():
  /// the engine's drafter runs other requests' draft steps there (actors/sliced_task.hpp).
  /// Empty: nothing.
  std::function<void()> chunk_hook;

 private:
  std::unique_ptr<cpu::ThreadPool> pool_;
};

/// Runs ws.chunk_hook, if any, with the prefill's own settings of `ws` (stats,
/// prompt_rows, providers) set aside meanwhile and put back after: the passes the
/// hook runs over the same workspace are plain ones. Between two chunks nothing else
/// of a prefill lives in the workspace.
void between_prefill_chunks(Workspace& ws);

/// Marks the passes run while it lives as a prompt's rows (Workspace::prompt_rows),
/// or with `prompt` false as not (the LM head); the mark before comes back after.
class PromptRows {
 public:
  explicit PromptRows(Workspace& ws, bool prompt = true) : ws_(ws), was_(ws.prompt_rows) {
    ws.prompt_rows = prompt;
  }
  ~PromptRows() { ws_.prompt_rows = was_; }
  PromptRows(const PromptRows&) = delete;
  PromptRows& operator=(const PromptRows&) = delete;

 private:
  Workspace& ws_;
  bool was_;
};

/// Threads used when none are asked for: the hardware's cores, at most 2 per
/// decoding stream. Small matrices still run on one thread (see forward.cpp).
[[nodiscard]] int default_thread_count();

/// Runs `rows` through every layer, writing their K and V into `cache` (which must
/// have room: see PagedKvCache::reserve), and returns the logits of the rows with
/// want_logits, in row order, in `logits` ([count, vocab]).
///
/// Batch invariance: a row's logits and KV are bit-identical whatever other rows
/// share the pass (every op is row-wise or uses batch-invariant kernels).
void forward(const Model& model, std::span<const ForwardRow> rows, PagedKvCache& cache,
             Workspace& ws, std::vector<float>& logits);


/// Runs `ids` into `seq` (which may already hold a prefix) in chunks of at most
/// `chunk` positions, reserving KV as needed; returns the logits of the last
/// position ([vocab]).
[[nodiscard]] std::vector<float> prefill(const Model& model, std::span<const int32_t> ids,
                                         KvSequence& seq, PagedKvCache& cache, Workspace& ws,
                                         size_t chunk = 256);

}  // namespace vc

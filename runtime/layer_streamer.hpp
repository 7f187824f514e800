// Streams a request's full KV from a full tier into two staging buffers (double
// buffering), layer by layer and, within a layer, in chunks of a fixed number of KV
// blocks: while a pass computes one chunk, a worker thread reads the next (the next
// layer's first chunk after a layer's last). Staging memory is two chunks whatever
// the context; attention merges the chunks in position order (AttentionRowState),
// so a chunked pass gives the bits of a pass over whole layers. A chunk the tier
// holds in memory and the pass's rows do not touch is borrowed in place instead
// (FullTier::lend_blocks: the host tier's chunks), with no copy: the CPU attends
// over it there and a device copies it from there (pinned). This is the PCIe
// pattern of the GPU path; on a CPU-only machine the "link" is host memory or the
// disk, optionally throttled to a modelled bandwidth (which borrowed chunks still
// take their turn on).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvtiers/fast_memory.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/forward.hpp"
#include "runtime/modelled_link.hpp"

namespace vc {

class LayerStreamer final : public LayerKvProvider {
 public:
  /// chunk_positions: KV positions staged per chunk (rounded up to whole blocks);
  /// 0 stages whole layers.
  explicit LayerStreamer(FullTier& tier, size_t chunk_positions = kDefaultChunkPositions);
  ~LayerStreamer() override;
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  static constexpr size_t kDefaultChunkPositions = 1024;
  /// Blocks per chunk of a host full tier (HostFullTier's chunk_blocks) that a
  /// streamer staging `chunk_positions` at a time borrows every whole chunk from:
  /// one of its chunks per allocation (whole layers, 0: the tier's default).
  [[nodiscard]] static size_t host_tier_chunk_blocks(size_t chunk_positions, size_t block_tokens) {
    return chunk_positions == 0 || block_tokens == 0 ? 16
                                                     : (chunk_positions + block_tokens - 1) / block_tokens;
  }

  /// Models a slower link of its own: each chunk read takes at least bytes /
  /// bytes_per_second (0 = as fast as the tier delivers).
  void set_link_bandwidth(double bytes_per_second) {
    link_ = bytes_per_second > 0 ? std::make_shared<ModelledLink>(bytes_per_second) : nullptr;
  }
  /// Reads over `link`, shared with other streamers (null: as fast as the tier
  /// delivers): chunks take their turn on it.
  void set_link(std::shared_ptr<ModelledLink> link) { link_ = std::move(link); }
  /// Positions per chunk for the passes started from now on (0: whole layers).
  void set_chunk_positions(size_t n) { chunk_positions_ = n; }
  [[nodiscard]] size_t chunk_positions() const { return chunk_positions_; }
  /// Charges the staging buffers to `budget` (null: uncounted); a pass whose
  /// staging does not fit fails in start().
  void set_budget(FastMemory* budget);
  /// Called on the copy thread after each chunk lands (tracing).
  using LayerObserver = std::function<void(uint64_t id, size_t layer,
                                           std::chrono::steady_clock::time_point begin,
                                           std::chrono::steady_clock::time_point end, size_t bytes)>;
  void set_layer_observer(LayerObserver f) { observer_ = std::move(f); }

  /// Prepares a pass over request `id`: the tier holds positions [0, n_full); the
  /// pass writes rows at positions [n_full, n_full + n_rows). Starts reading.
  /// whole_layers: stage each layer in one chunk (a pass whose statistics read the
  /// layer's keys).
  void start(uint64_t id, size_t n_full, size_t n_rows, bool whole_layers = false);

  /// Frees the staging buffers and the pass's rows (after any read in flight; no
  /// later chunk of the pass is read). The next start() allocates them again. For
  /// when no pass follows at once: after a prefill, compression and drafting run
  /// without them.
  void free_buffers();

  void write(size_t layer, size_t pos, const float* k_row, const float* v_row) override;
  [[nodiscard]] size_t chunks() const override { return n_chunks_; }
  [[nodiscard]] KvChunk acquire(size_t layer, size_t c) override;
  void release(size_t layer, size_t c) override;
  [[nodiscard]] cpu::PagedKv shape() const override;

  /// The K and V the pass wrote for row r (position n_full + r) of `layer`, fp32
  /// ([kv_heads, head_dim] each), for committing to the tiers.
  [[nodiscard]] const float* row_k(size_t layer, size_t r) const;
  [[nodiscard]] const float* row_v(size_t layer, size_t r) const;

  /// Seconds passes spent waiting for chunks to land, and bytes read, since
  /// construction; chunks_lent: those borrowed from the tier in place.
  [[nodiscard]] double wait_seconds() const { return wait_seconds_; }
  [[nodiscard]] size_t bytes_streamed() const { return bytes_streamed_.load(std::memory_order_relaxed); }
  [[nodiscard]] size_t chunks_lent() const { return chunks_lent_.load(std::memory_order_relaxed); }
  /// Bytes of the two staging buffers now (K and V of both).
  [[nodiscard]] size_t staging_bytes() const { return staging_bytes_; }
  /// Bytes the two staging buffers of one pass need for a context of `n_pos`
  /// positions (at most two chunks, whatever the context, unless whole layers).
  [[nodiscard]] size_t staging_bytes_for(size_t n_pos) const;
  /// The copy thread (for binding it to the link's cores).
  [[nodiscard]] std::thread::native_handle_type copy_thread() { return thread_.native_handle(); }

 private:
  struct Buffer {
    KvStaging staging;
    std::vector<int32_t> table;  // absolute block j -> slot j - first (else -1)
    long step = -1;              // (layer * n_chunks + chunk) staged here, -1: none
    bool consumed = true;        // the pass released `step`: the buffer may be refilled
    std::optional<FullTier::LentBlocks> lent;  // `step` borrowed from the tier, not staged
  };
  void worker();
  [[nodiscard]] std::pair<size_t, size_t> chunk_blocks(size_t c) const;  // [begin, end)
  void overlay_rows(Buffer& b, size_t layer, size_t c);

  FullTier& tier_;
  KvCacheConfig cfg_;
  size_t chunk_positions_;
  Buffer buf_[2];
  size_t row_floats_ = 0;
  std::vector<float> rows_k_, rows_v_;  // [layers][n_rows][kv_heads * head_dim]
  uint64_t id_ = 0;
  size_t n_full_ = 0, n_rows_ = 0, n_blocks_ = 0, chunk_blocks_ = 0, n_chunks_ = 0;
  std::shared_ptr<ModelledLink> link_;
  LayerObserver observer_;
  double wait_seconds_ = 0;
  std::atomic<size_t> bytes_streamed_{0};  // read by stats from other threads
  std::atomic<size_t> chunks_lent_{0};
  size_t staging_bytes_ = 0;
  FastCharge staging_charge_;

  std::mutex mu_;
  std::condition_variable cv_;
  long next_read_ = 0, total_steps_ = 0;  // the worker reads steps in order
  bool reading_ = false;
  uint64_t generation_ = 0;               // start() begins a new pass
  std::string error_;                     // a read failure, rethrown on the computing thread
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vc

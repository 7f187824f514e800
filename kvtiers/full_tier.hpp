// The full tier: every token's KV of each request, block by block, in exactly the
// paged layout and storage dtype of PagedKvCache, in a slower, larger memory (host
// RAM or a disk). The verify pass stages one layer at a time from it and attends
// over the staging buffer with cpu::attention_row, bit-identically to decode.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kvtiers/host_pinning.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "kvtiers/tier_stats.hpp"

namespace vc {

/// Page size every tier aligns its memory, file offsets and read sizes to.
inline constexpr size_t kTierAlign = 4096;

/// Page-aligned staging for one layer read back from a full tier: K and V, each
/// [n_blocks, kv_heads, block_tokens, head_dim] in the tier's dtype, and the
/// identity block table 0, 1, 2, ... that lets cpu::attention_row read them.
/// Offered to the installed host pinner (kvtiers/host_pinning.hpp): a device copies
/// verify chunks from here.
class KvStaging {
 public:
  explicit KvStaging(const KvCacheConfig& cfg) : cfg_(cfg) {}
  /// Grows (never shrinks) to hold `n_pos` positions.
  void reserve(size_t n_pos);
  [[nodiscard]] size_t capacity() const { return capacity_; }
  [[nodiscard]] void* k() { return k_.get(); }
  [[nodiscard]] void* v() { return v_.get(); }
  /// The attention kernel's view of the staged layer (valid until reserve grows).
  [[nodiscard]] cpu::PagedKv view() const;

 private:
  struct Free {
    void operator()(void* p) const {
      unpin_host(p);
      std::free(p);
    }
  };
  KvCacheConfig cfg_;
  size_t capacity_ = 0;
  std::unique_ptr<std::byte, Free> k_, v_;
  std::vector<int32_t> table_;
};

/// Every position's K and V of each request (identified by a uint64_t id).
/// Layout and rounding are those of PagedKvCache with the same config (num_blocks
/// is ignored: a request grows as long as its storage allows). Positions of a
/// layer are written without gaps (append or overwrite); length(id) is the longest
/// layer. Thread-safe: every public operation holds the tier's lock, so a mover
/// can stream one request while another request's verified KV is committed.
///
/// Byte accounting is logical: a position of one layer is 2 * kv_heads * head_dim *
/// dtype_size bytes (K and V). held = length (or the end of a run written ahead,
/// write_blocks_ahead) * bytes_per_token; written counts the
/// positions stored by write()/copy_from(); read counts the positions delivered by
/// read_layer().
class FullTier {
 public:
  virtual ~FullTier() = default;
  FullTier(const FullTier&) = delete;
  FullTier& operator=(const FullTier&) = delete;

  [[nodiscard]] const KvCacheConfig& config() const { return cfg_; }
  /// The tier's own budget: writes that would make it hold more than `bytes` of KV
  /// (all requests together, bytes_held_total) fail with an error naming the sizes.
  /// 0: not limited.
  void set_capacity_bytes(size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    capacity_ = bytes;
  }
  [[nodiscard]] size_t capacity_bytes() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return capacity_;
  }
  /// "host" or "disk".
  [[nodiscard]] virtual std::string_view kind() const = 0;

  /// Starts request `id` with no positions; `capacity_positions` is a size hint.
  /// Throws vc::Error if `id` exists.
  void create(uint64_t id, size_t capacity_positions = 0);
  [[nodiscard]] bool contains(uint64_t id) const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return slots_.count(id) != 0;
  }

  /// Stores one position of one layer: k_row, v_row: [kv_heads, head_dim] fp32,
  /// rounded to the dtype exactly like PagedKvCache::write. `pos` must be at most
  /// the layer's current length (no gaps).
  void write(uint64_t id, size_t layer, size_t pos, const float* k_row, const float* v_row);
  /// Copies the raw bytes of positions [first_pos, first_pos + n) of every layer of
  /// `seq` in `cache` (same shape, block_tokens and dtype). first_pos must be at
  /// most every layer's length.
  void copy_from(uint64_t id, const PagedKvCache& cache, const KvSequence& seq, size_t first_pos,
                 size_t n);

  /// Bytes of K (and, separately, of V) read_layer writes for `n_pos` positions:
  /// whole blocks, rounded up to kTierAlign.
  [[nodiscard]] size_t staging_bytes(size_t n_pos) const;
  /// Copies layer `layer`'s first `n_pos` positions into k_out and v_out (each
  /// staging_bytes(n_pos) bytes; 4096-aligned buffers let the disk tier read into
  /// them directly) in the block layout with the identity block table. Slots past
  /// n_pos in the last block hold unspecified values (the kernel never reads them).
  void read_layer(uint64_t id, size_t layer, size_t n_pos, void* k_out, void* v_out);
  /// As above into `staging` (grown to n_pos positions).
  void read_layer(uint64_t id, size_t layer, size_t n_pos, KvStaging& staging);
  /// Copies blocks [first_block, first_block + n_blocks) of layer `layer` into k_out
  /// and v_out (block j at offset (j - first_block) * block bytes; each buffer
  /// staging_bytes(n_blocks * block_tokens) bytes): one chunk of a verify or prefill
  /// pass's staging. Every block must hold at least one written position; slots
  /// past the layer's length hold unspecified values. Counts the positions held in
  /// those blocks as read.
  void read_blocks(uint64_t id, size_t layer, size_t first_block, size_t n_blocks, void* k_out,
                   void* v_out);

  /// Blocks a tier lends in place (lend_blocks): K of the run's first block at `k`,
  /// V at `v`, the run's other blocks following each contiguously. `keep` holds the
  /// memory: it stays valid while the lender lives, even after the request is
  /// truncated or released.
  struct LentBlocks {
    const std::byte* k = nullptr;
    const std::byte* v = nullptr;
    std::shared_ptr<const void> keep;
  };
  /// Blocks [first_block, first_block + n_blocks) of layer `layer`, every one of
  /// them fully written, lent in place instead of copied (read_blocks' bytes with
  /// no copy): the verify and prefill passes attend over them directly, and a
  /// device copies them from there (the host tier's memory is offered to the
  /// installed pinner, kvtiers/host_pinning.hpp). Empty when the tier cannot: the
  /// disk tier, a run across two of the host tier's chunks, a block not fully
  /// written. The caller must not read positions the request later rewrites (only
  /// a truncation below them could). Counts the positions as read_blocks does.
  [[nodiscard]] std::optional<LentBlocks> lend_blocks(uint64_t id, size_t layer, size_t first_block,
                                                      size_t n_blocks);

  /// Appends whole blocks of layer `layer` from raw bytes in the tier's dtype and
  /// block layout (k, v: block j at j * block bytes, as read_blocks writes them):
  /// the layer must hold exactly first_block * block_tokens positions, and holds
  /// (first_block + n_blocks) * block_tokens after. How a prefix fetched from the
  /// remote store enters the tier, bit for bit as it was computed.
  void write_blocks(uint64_t id, size_t layer, size_t first_block, size_t n_blocks,
                    const void* k, const void* v);

  /// A run of whole blocks written ahead of the prefill: blocks [first_block,
  /// first_block + n_blocks) of every layer, above the positions each layer holds
  /// (k[l], v[l]: layer l's raw bytes as write_blocks takes them). How the chunks
  /// a back fetch brings from the last one down go straight into the entry while
  /// its front is still prefilled (kvtiers/remote/back_fetch_meeting.hpp). The run
  /// is not part of the request's length until join_ahead(), but it is held (the
  /// budget counts it) and stays where it is. It grows downward: a later write must
  /// end where the run begins. Throws vc::Error, writing nothing, when a layer holds
  /// positions at or past first_block or the blocks do not end at the run.
  void write_blocks_ahead(uint64_t id, size_t first_block, size_t n_blocks,
                          std::span<const std::byte* const> k, std::span<const std::byte* const> v);
  /// The run written ahead: positions [first, second), {0, 0} when there is none.
  [[nodiscard]] std::pair<size_t, size_t> ahead(uint64_t id) const;
  /// The run becomes part of the request up to position `end` (at most the run's
  /// end): every layer, which must hold at least the run's first position (writes
  /// past it landed in the run and are kept), then holds max(its length, end).
  /// What the run held past `end` is dropped (its storage stays the request's).
  void join_ahead(uint64_t id, size_t end);
  /// Forgets the run written ahead (no-op without one).
  void drop_ahead(uint64_t id);

  /// Drops positions >= `length` in every layer (rollback), and any run written
  /// ahead; no-op if not shorter than what the request holds.
  void truncate(uint64_t id, size_t length);
  /// Forgets request `id` and frees its storage.
  void release(uint64_t id);
  /// As release(), but a no-op returning false when `id` is not held: safe when two
  /// owners may both release (checked and done under one lock).
  bool release_if_present(uint64_t id);
  /// Positions held (the longest layer).
  [[nodiscard]] size_t length(uint64_t id) const;
  /// Positions held by one layer.
  [[nodiscard]] size_t layer_length(uint64_t id, size_t layer) const;

  /// Bytes of K+V per token over all layers (as PagedKvCache::bytes_per_token).
  [[nodiscard]] size_t bytes_per_token() const { return 2 * cfg_.num_layers * row_bytes_; }
  /// Bytes of KV request `id` holds: its length, or the end of a run written ahead.
  [[nodiscard]] size_t bytes_held(uint64_t id) const;
  [[nodiscard]] size_t bytes_held_total() const;
  [[nodiscard]] size_t bytes_read_total() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return read_;
  }
  [[nodiscard]] size_t bytes_written_total() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return written_;
  }
  [[nodiscard]] TierBytes bytes() const {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return {bytes_held_total(), read_, written_};
  }

 protected:
  explicit FullTier(const KvCacheConfig& cfg);

  /// One request's state; tiers extend it with their storage.
  struct Slot {
    virtual ~Slot() = default;
    std::vector<size_t> layer_length;  // [num_layers]
    size_t length = 0;                 // max of layer_length
    size_t ahead_begin = 0, ahead_end = 0;  // the run written ahead (none when equal)
    /// Positions the slot holds, the run written ahead included.
    [[nodiscard]] size_t held() const { return std::max(length, ahead_end); }
  };
  /// Whether block `block` of `layer` holds written positions (below the layer's
  /// length, or in the run written ahead).
  [[nodiscard]] bool block_written(const Slot& s, size_t layer, size_t block) const {
    const size_t p = block * cfg_.block_tokens;
    return p < s.layer_length[layer] || (p >= s.ahead_begin && p < s.ahead_end);
  }
  /// Where one layer's K and V of one block are written.
  struct BlockRef {
    std::byte* k = nullptr;
    std::byte* v = nullptr;
  };

  /// New storage for `id` with room for `capacity_blocks` blocks (may be 0).
  [[nodiscard]] virtual std::unique_ptr<Slot> open_slot(uint64_t id, size_t capacity_blocks) = 0;
  /// Makes blocks [0, n_blocks) addressable.
  virtual void ensure_blocks(uint64_t id, Slot& s, size_t n_blocks) = 0;
  /// Layer `layer`'s K and V of block `block` ([kv_heads, block_tokens, head_dim]
  /// each, holding what was written there), valid until the next call on `s`.
  [[nodiscard]] virtual BlockRef block_for_write(uint64_t id, Slot& s, size_t layer,
                                                 size_t block) = 0;
  /// Copies layer `layer`'s blocks [first_block, first_block + n_blocks) into k and
  /// v (block j at (j - first_block) * block bytes).
  virtual void read_blocks(uint64_t id, Slot& s, size_t layer, size_t first_block,
                           size_t n_blocks, std::byte* k, std::byte* v) = 0;
  /// The run lend_blocks describes, when this tier holds it contiguously in memory
  /// (the blocks are in range and fully written); empty by default.
  [[nodiscard]] virtual std::optional<LentBlocks> lent_run(Slot& s, size_t layer,
                                                           size_t first_block, size_t n_blocks) {
    (void)s, (void)layer, (void)first_block, (void)n_blocks;
    return std::nullopt;
  }
  /// Called after the lengths of `s` dropped to `length`.
  virtual void on_truncate(Slot& s, size_t length) {
    (void)s;
    (void)length;
  }
  /// Frees the storage of `s` (release and destruction).
  virtual void close_slot(uint64_t id, Slot& s) = 0;
  /// Names the request (and its file) in error messages.
  [[nodiscard]] virtual std::string where(uint64_t id) const;

  /// Closes every slot; derived destructors call it (close_slot is virtual).
  void close_all();

  [[nodiscard]] size_t blocks_for(size_t n_pos) const {
    return (n_pos + cfg_.block_tokens - 1) / cfg_.block_tokens;
  }
  [[nodiscard]] size_t block_bytes() const { return cfg_.block_tokens * row_bytes_; }

  KvCacheConfig cfg_;
  size_t head_bytes_ = 0;  // one head's row: head_dim * dtype_size
  size_t row_bytes_ = 0;   // one position of K (or V) in one layer: kv_heads * head_bytes_

 private:
  [[nodiscard]] Slot& slot(uint64_t id, const char* op);
  [[nodiscard]] const Slot& slot(uint64_t id, const char* op) const;
  void check_layer(uint64_t id, size_t layer, const char* op) const;

  /// Throws when growing `id` to `new_length` positions passes the capacity.
  void check_capacity(uint64_t id, const Slot& s, size_t new_length) const;

  std::unordered_map<uint64_t, std::unique_ptr<Slot>> slots_;
  size_t read_ = 0, written_ = 0;
  size_t capacity_ = 0;
  mutable std::recursive_mutex mu_;  // guards every public operation
};

/// Full tier in host memory: per request, chunks of `chunk_blocks` blocks, each one
/// page-aligned allocation laid out [layers][K, V][chunk_blocks * block bytes],
/// offered to the installed host pinner (so a device copies lent blocks by DMA), and
/// shared with the passes it lends blocks to (lend_blocks: a run within one chunk).
class HostFullTier final : public FullTier {
 public:
  explicit HostFullTier(const KvCacheConfig& cfg, size_t chunk_blocks = 16);
  ~HostFullTier() override;
  [[nodiscard]] std::string_view kind() const override { return "host"; }
  /// Bytes of host memory allocated for every request (whole chunks).
  [[nodiscard]] size_t bytes_allocated() const { return allocated_; }
  /// Places each chunk allocated from now on: called with its memory, page-aligned
  /// and not yet touched, before it is zeroed (so a NUMA binding decides where its
  /// pages land: the engine binds them to the GPU's node, or the rank's). Must not
  /// throw. Null: where the allocating thread's memory policy puts them.
  void set_memory_placer(std::function<void(void*, size_t)> placer);

 private:
  struct HostSlot;
  std::unique_ptr<Slot> open_slot(uint64_t id, size_t capacity_blocks) override;
  void ensure_blocks(uint64_t id, Slot& s, size_t n_blocks) override;
  BlockRef block_for_write(uint64_t id, Slot& s, size_t layer, size_t block) override;
  void read_blocks(uint64_t id, Slot& s, size_t layer, size_t first_block, size_t n_blocks,
                   std::byte* k, std::byte* v) override;
  std::optional<LentBlocks> lent_run(Slot& s, size_t layer, size_t first_block,
                                     size_t n_blocks) override;
  void on_truncate(Slot& s, size_t length) override;
  void close_slot(uint64_t id, Slot& s) override;
  [[nodiscard]] size_t chunk_bytes() const { return 2 * cfg_.num_layers * region_bytes(); }
  [[nodiscard]] size_t region_bytes() const { return chunk_blocks_ * block_bytes(); }

  size_t chunk_blocks_;
  size_t allocated_ = 0;
  std::mutex placer_mu_;  // guards placer_ (set from another thread than the allocating one)
  std::function<void(void*, size_t)> placer_;
};

/// Full tier on disk: one file per request, `<private dir>/req-<id>.kv`, where the
/// private dir is made by this instance with mkdtemp (`vericache-kv-XXXXXX`) under
/// the given directory. Two tiers (in one process or in two) sharing a directory
/// therefore never see each other's files, and nothing already in the directory is
/// ever opened, replaced or deleted: files are created with O_CREAT | O_EXCL, the
/// re-layout rename stays inside the private dir, and cleanup unlinks only the files
/// this tier created, then rmdirs its private dir. The given directory is created if
/// missing and never removed. The private dir is listed in the scratch registry
/// (kvtiers/scratch_registry.hpp) while the tier lives, so a signal handler can
/// delete it with remove_all_scratch().
///
/// File layout: 2 * num_layers regions of equal, fixed capacity, in the order
/// layer 0 K, layer 0 V, layer 1 K, ...; each region is `capacity_blocks` blocks
/// in the paged layout, padded to a multiple of 4 KiB, so region r starts at
/// r * region_bytes (4 KiB-aligned) and one layer's K (or V) is read with one
/// aligned pread. When a request outgrows its capacity the file is re-laid out
/// (capacity at least doubled) into a new file renamed over the old one. The file is
/// sized with ftruncate at creation (sparse), so a shorter file means it was
/// truncated. Files are scratch space of this tier: no header, deleted on release
/// and destruction.
///
/// Writes go through one buffered descriptor per request, with one block per layer
/// held in memory until a write moves that layer to another block (decode writes a
/// block's positions, then the next block's). Reads open the file per call, with
/// O_DIRECT when the buffers are 4 KiB-aligned and the filesystem accepts it
/// (EINVAL: buffered reads from then on).
class DiskFullTier final : public FullTier {
 public:
  /// Makes a private directory under `dir` (created if missing; "" = $TMPDIR, else
  /// /tmp). Throws vc::Error naming the directory if it cannot be created or written,
  /// or naming TMPDIR if that is not an existing directory. `direct_io`: try O_DIRECT
  /// for reads.
  DiskFullTier(const KvCacheConfig& cfg, std::string dir, bool direct_io = true);
  ~DiskFullTier() override;
  [[nodiscard]] std::string_view kind() const override { return "disk"; }

  /// The directory given (or the temp dir) that holds the private dir.
  [[nodiscard]] const std::string& parent_dir() const { return parent_; }
  /// This tier's private directory, where its files live.
  [[nodiscard]] const std::string& dir() const { return dir_; }
  /// The KV file of request `id` (whether or not it exists).
  [[nodiscard]] std::string file_path(uint64_t id) const;
  /// Whether reads currently use O_DIRECT.
  [[nodiscard]] bool direct_io() const { return direct_io_; }
  /// Bytes actually moved by pread / pwrite (whole blocks, 4 KiB-rounded reads).
  [[nodiscard]] size_t io_bytes_read() const { return io_read_; }
  [[nodiscard]] size_t io_bytes_written() const { return io_written_; }

 private:
  struct DiskSlot;
  std::unique_ptr<Slot> open_slot(uint64_t id, size_t capacity_blocks) override;
  void ensure_blocks(uint64_t id, Slot& s, size_t n_blocks) override;
  BlockRef block_for_write(uint64_t id, Slot& s, size_t layer, size_t block) override;
  void read_blocks(uint64_t id, Slot& s, size_t layer, size_t first_block, size_t n_blocks,
                   std::byte* k, std::byte* v) override;
  void close_slot(uint64_t id, Slot& s) override;
  [[nodiscard]] std::string where(uint64_t id) const override;

  [[nodiscard]] size_t region_bytes(size_t capacity_blocks) const;
  void flush(uint64_t id, DiskSlot& d, size_t layer);
  void relayout(uint64_t id, DiskSlot& d, size_t capacity_blocks);
  /// A read descriptor for request `id`'s file, checked to be the file `write_fd`
  /// writes (a file replaced behind the tier is an error, never its bytes).
  [[nodiscard]] int open_for_read(uint64_t id, int write_fd, bool aligned, bool& direct);

  std::string parent_;     // given directory (kept)
  std::string dir_;        // private directory (mkdtemp), removed on destruction
  int scratch_slot_ = -1;  // in the scratch registry
  bool direct_io_;
  size_t io_read_ = 0, io_written_ = 0;
};

}  // namespace vc

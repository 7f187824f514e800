// The remote tier: prefix KV of earlier requests, in a shared Redis-protocol store,
// in chunks of `chunk_tokens` tokens keyed by chained hashes (chunk_key.hpp), each
// value checked on the way in (chunk_value.hpp).
//
// Fault policy (never a wrong token): fetch_prefix() uses the longest run of chunks,
// from the first, that arrived and passed every check; anything else — the store
// down or unreachable, a connection dropped or timed out mid-batch, a missing or
// evicted key, a value of another format version, layout or key, a bad checksum —
// ends the run there, and the caller recomputes the rest locally (prefill). A chunk
// enters the full tier only after its checks passed, so a fault can shorten the
// prefix but never change a bit of it. Publishing is write-behind: chunks are copied
// into a bounded queue and sent by a background thread; when the queue is full, or
// the store fails, chunks are dropped (counted), never waited for. After a transport
// fault the store is skipped for `retry_after` (store_health.hpp): fetches meanwhile
// end at once (their requests recompute locally) and publish batches are dropped.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/chunk_key.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/remote/store_health.hpp"

namespace vc {

struct RemoteTierConfig {
  std::string url;             // redis://HOST:PORT
  size_t chunk_tokens = 256;   // a multiple of the KV block size
  int ttl_seconds = 86400;     // keys expire (0: never)
  RedisTimeouts timeouts;
  std::chrono::milliseconds retry_after{5000};  // the store is skipped this long after a fault (0: never)
  size_t connections = 2;      // fetch pool; the publisher has its own connection
  size_t fetch_window = 8;     // chunks requested per pipelined batch
  /// Chunks per batch of a back fetch (fetch_back) while the front is far below
  /// (BackFetchMeeting::batch_at): a batch of one leaves the link idle between chunks
  /// (2: 2.20 s instead of 2.37 s to the first token at 16K in `bench remote`'s engine
  /// row, medians of 4 runs; README). 0 counts as 1.
  size_t back_fetch_window = 2;
  size_t publish_queue_bytes = size_t(256) << 20;  // write-behind bound
  size_t tp_rank = 0, tp_degree = 1;
  /// How the KV is computed (Model::numerics()): KV computed another way (another
  /// SIMD path, a GPU) has other bits, so its chunks go under other keys.
  std::string numerics;
};

/// What one fetch_prefix() found.
struct RemoteFetch {
  size_t chunks = 0;           // chunks used, from the first one asked for
  size_t positions = 0;        // the entry's positions now: where the run began + chunks * chunk_tokens
  size_t bytes_full = 0;       // value bytes received for them
  double seconds = 0;
  std::string stop_reason;     // why the run ended before the limit ("" = reached it)
};

/// What one fetch_compressed() found: the chunks' views joined into one.
struct RemoteCompressedFetch {
  std::optional<CompressedView> view;  // positions [from, positions) when chunks > 0
  size_t chunks = 0;     // chunks used, from the first one asked for
  size_t positions = 0;  // where the run ended (from + chunks * chunk_tokens)
  size_t bytes = 0;  // value bytes received for the chunks used
  double seconds = 0;
  std::string stop_reason;  // as RemoteFetch's
};

/// What one fetch_back() found: the run of full chunks [first, end) fetched from the
/// last down and checked; with `values` held, append_back_chunks() puts them into a tier.
struct RemoteBackFetch {
  size_t first = 0;  // the run's lowest chunk (== end when none was fetched)
  size_t end = 0;    // one past its highest: the store's cached prefix ends there
  /// The chunk the run could not take (missing, refused, unreadable), `end` when
  /// it stopped only where the caller had reached or at chunk 0.
  size_t failed_at = 0;
  size_t bytes = 0;  // value bytes received, those of chunks the caller no longer wanted included
  double seconds = 0;
  /// Why the run ends at `first`: a chunk missing or refused below it, else why the
  /// cached prefix ends at `end` ("" when the caller's own prefill met the run and
  /// the prefix reached the limit).
  std::string stop_reason;
  /// values[c - first]: the checked value of chunk c, and where its payload starts.
  std::vector<std::pair<std::string, size_t>> values;
};

/// Counters of the publisher (write-behind).
struct RemotePublishStats {
  size_t queued = 0, sent = 0, dropped_full_queue = 0, failed = 0, skipped_present = 0;
  size_t compressed_queued = 0;     // of `queued`: compressed chunks
  size_t compressed_uncuttable = 0; // compressed chunks not published: the view cannot be cut there
  size_t skipped_store_down = 0;    // of `failed`: dropped unsent while the store was skipped
};

/// Appends chunks [from, back.end) of `back` (its values held, ascending from
/// back.first) to request `id` of `tier`, which holds exactly from * chunk_tokens
/// positions of chunks of `layout`; back.first <= from (else vc::Error).
void append_back_chunks(const ChunkLayout& layout, const RemoteBackFetch& back, size_t from, FullTier& tier,
                        uint64_t id);
/// Writes chunk c of `layout` (a checked value, its payload from `payload_offset`)
/// into request `id` of `tier` ahead of what the entry holds
/// (FullTier::write_blocks_ahead): a back fetch's chunk, the run growing downward.
void write_chunk_ahead(const ChunkLayout& layout, size_t c, const std::string& value, size_t payload_offset,
                       FullTier& tier, uint64_t id);

class RemoteTier {
 public:
  /// Checks the URL (throws vc::Error, one line) and starts the publisher. Connects
  /// lazily: an unreachable store costs each fetch one connect timeout. `health`:
  /// shared with other tiers over the same store (a fault one sees, all skip); null:
  /// its own (retry_after of `cfg`).
  RemoteTier(const RemoteTierConfig& cfg, const KvCacheConfig& kv, uint64_t model_fingerprint,
             std::shared_ptr<StoreHealth> health = nullptr);
  /// Sends what is queued, then stops; after a failed batch the rest is dropped.
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  [[nodiscard]] const ChunkLayout& layout() const { return layout_; }
  [[nodiscard]] const RemoteTierConfig& config() const { return cfg_; }
  [[nodiscard]] const RedisEndpoint& endpoint() const { return endpoint_; }

  /// Appends to request `id` of `tier` the longest cached prefix of `tokens` of at
  /// most `max_positions` positions, in whole chunks, from position
  /// `from_positions` on: the entry holds exactly that many positions (a multiple
  /// of chunk_tokens, else vc::Error), so a long prefix can be fetched a few chunks
  /// at a time. Never throws for store faults (see the policy above).
  [[nodiscard]] RemoteFetch fetch_prefix(std::span<const int32_t> tokens, size_t max_positions,
                                         FullTier& tier, uint64_t id, size_t from_positions = 0);

  /// The full chunks of the longest cached prefix of `tokens` (at most
  /// `max_positions` positions in whole chunks), fetched from the back: the chunks
  /// the store holds from the first are counted (EXISTS), then fetched from the last
  /// one down, RemoteTierConfig::back_fetch_window GETs at a time (so that a stop
  /// wastes at most that many chunks' transfer; `batch`, if given, says how many for
  /// the batch whose highest chunk is `top`), each checked as fetch_prefix() checks
  /// it. Once chunk c passed its
  /// checks, its value (and where its payload starts) goes to `take`, which keeps
  /// it and returns true, or returns false to end the run above it (the caller
  /// computes the positions below itself, meeting the run from the front; see
  /// BackFetchMeeting). The fault policy is fetch_prefix()'s: a missing, refused or
  /// unreadable chunk ends the run at the chunk above it. Never throws for store
  /// faults. The result's `values` stay empty (the caller holds them).
  [[nodiscard]] RemoteBackFetch fetch_back(
      std::span<const int32_t> tokens, size_t max_positions,
      const std::function<bool(size_t chunk, std::string&& value, size_t payload_offset)>& take,
      const std::function<size_t(size_t top)>& batch = {});
  /// How many of the full chunks of `tokens` (at most `max_positions` positions in
  /// whole chunks) the store holds from the first on (EXISTS only; 0 while the store
  /// is skipped).
  [[nodiscard]] size_t count_full(std::span<const int32_t> tokens, size_t max_positions);

  /// The longest cached run, from the first chunk, of the compressed form of
  /// `tokens` under `compressor_spec` (compressor name, parameters and ratio: one
  /// string, see compressor_spec()), at most `max_positions` positions in whole
  /// chunks, each checked (header, checksum, then the view's own consistency) and
  /// joined into one view. The same fault policy as fetch_prefix(): the run ends at
  /// the first chunk that is missing, rejected or cannot be joined. From
  /// `from_positions` on (a multiple of chunk_tokens, else vc::Error): the view then
  /// covers [from_positions, positions) (CompressedView::append joins it to the
  /// view of the positions before), so a long prefix can come a few chunks at a time.
  [[nodiscard]] RemoteCompressedFetch fetch_compressed(std::span<const int32_t> tokens,
                                                       size_t max_positions,
                                                       const std::string& compressor_spec,
                                                       size_t from_positions = 0);

  /// How many chunks, from the first, of the compressed form of `tokens` under
  /// `compressor_spec` the store holds (at most max_positions / chunk_tokens): keys
  /// asked with EXISTS, no value read, so a caller can see how far a compressed
  /// prefix would reach before paying for its bytes. A store fault ends the count.
  [[nodiscard]] size_t count_compressed(std::span<const int32_t> tokens, size_t max_positions,
                                        const std::string& compressor_spec);

  /// Queues the complete chunks of `tokens` from chunk `first_chunk` on, read from
  /// request `id` of `tier` (which holds at least those positions), for publishing.
  /// Returns the chunks queued.
  size_t publish(std::span<const int32_t> tokens, size_t first_chunk, FullTier& tier, uint64_t id);
  /// Queues the compressed form of the complete chunks of `tokens` from
  /// `first_chunk` on that `view` covers (each chunk's slice of the view), under
  /// `compressor_spec`; stops at the first chunk the view cannot be cut at
  /// (counted). Returns the chunks queued.
  size_t publish_compressed(std::span<const int32_t> tokens, size_t first_chunk,
                            const CompressedView& view, const std::string& compressor_spec);
  /// Waits until the queue is empty (tests; the CLI before it exits).
  void flush();
  [[nodiscard]] RemotePublishStats publish_stats() const;
  /// Fetches and publish batches skipped because the store failed recently.
  [[nodiscard]] size_t skipped_while_down() const { return health_->skipped(); }
  /// Its store's health (shared when given at construction).
  [[nodiscard]] const std::shared_ptr<StoreHealth>& health() const { return health_; }

 private:
  void publisher_loop();
  /// Copies a value into the write-behind queue; false when it would overflow.
  bool enqueue(std::string key, std::string value);
  /// How many of `keys`, from the first, the store holds (EXISTS, pipelined); a
  /// store fault ends the count.
  [[nodiscard]] size_t count_run(const std::vector<std::string>& keys);
  /// How fetch_run() batches its GETs, and what else it reports.
  struct FetchRunOptions {
    size_t window = 0;  // GETs per pipelined batch (0: RemoteTierConfig::fetch_window)
    /// If set, the size of the batch that begins at keys[first] instead.
    std::function<size_t(size_t first)> window_at;
    /// > 0: keys[i] is chunk down_from - 1 - i (a fetch from the back), for the
    /// stop reasons' chunk numbers.
    size_t down_from = 0;
    /// If given, counts every value that came, those after a stop in its batch
    /// included (fetch_run's `bytes` counts the accepted ones).
    size_t* received = nullptr;
  };
  /// GETs `keys[begin, limit)` in pipelined batches and hands each value to `accept`
  /// (chunk index, value, why) until one is missing or refused; the counts and the
  /// reason go to `chunks`, `bytes` and `stop_reason`.
  template <class Accept>
  void fetch_run(const std::vector<std::string>& keys, size_t begin, size_t limit, Accept&& accept,
                 size_t& chunks, size_t& bytes, std::string& stop_reason, const FetchRunOptions& opt = {});

  RemoteTierConfig cfg_;
  RedisEndpoint endpoint_;
  KvCacheConfig kv_;
  ChunkLayout layout_;
  RedisClient fetch_client_;
  std::shared_ptr<StoreHealth> health_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<std::string, std::string>> queue_;  // key, value
  size_t queued_bytes_ = 0;
  bool sending_ = false, stop_ = false;
  RemotePublishStats pstats_;
  std::thread publisher_;
};

/// The compressor part of compressed chunk keys: the method's name, the user's
/// settings in order and the ratio ("snapkv;window=32;ratio=4").
[[nodiscard]] std::string compressor_spec(const std::string& name,
                                          const std::vector<std::pair<std::string, double>>& settings,
                                          double ratio);

/// `vericache cache stats`: keys of this project, and the store's memory.
struct RemoteStoreStats {
  size_t full_chunks = 0, compressed_chunks = 0, value_bytes = 0;
  std::string used_memory_human;
};
[[nodiscard]] RemoteStoreStats remote_store_stats(const RedisEndpoint& ep, RedisTimeouts t = {});
/// `vericache cache clear`: deletes every key of this project (kRemoteKeyPrefix),
/// nothing else; returns how many.
size_t remote_store_clear(const RedisEndpoint& ep, RedisTimeouts t = {});

}  // namespace vc

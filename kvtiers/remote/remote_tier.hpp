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
// the store fails, chunks are dropped (counted), never waited for.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/chunk_key.hpp"
#include "kvtiers/remote/redis_client.hpp"

namespace vc {

struct RemoteTierConfig {
  std::string url;             // redis://HOST:PORT
  size_t chunk_tokens = 256;   // a multiple of the KV block size
  int ttl_seconds = 86400;     // keys expire (0: never)
  RedisTimeouts timeouts;
  size_t connections = 2;      // fetch pool; the publisher has its own connection
  size_t fetch_window = 8;     // chunks requested per pipelined batch
  size_t publish_queue_bytes = size_t(256) << 20;  // write-behind bound
  size_t tp_rank = 0, tp_degree = 1;
};

/// What one fetch_prefix() found.
struct RemoteFetch {
  size_t chunks = 0;           // chunks used, from the first
  size_t positions = 0;        // chunks * chunk_tokens, now in the full tier
  size_t bytes_full = 0;       // value bytes received for them
  size_t bytes_compressed = 0; // compressed chunks received (not fetched yet: 0)
  double seconds = 0;
  std::string stop_reason;     // why the run ended before the limit ("" = reached it)
};

/// Counters of the publisher (write-behind).
struct RemotePublishStats {
  size_t queued = 0, sent = 0, dropped_full_queue = 0, failed = 0, skipped_present = 0;
};

class RemoteTier {
 public:
  /// Checks the URL (throws vc::Error, one line) and starts the publisher. Connects
  /// lazily: an unreachable store costs each fetch one connect timeout.
  RemoteTier(const RemoteTierConfig& cfg, const KvCacheConfig& kv, uint64_t model_fingerprint);
  /// Sends what is queued, then stops; after a failed batch the rest is dropped.
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  [[nodiscard]] const ChunkLayout& layout() const { return layout_; }
  [[nodiscard]] const RedisEndpoint& endpoint() const { return endpoint_; }

  /// Appends to request `id` of `tier` (which must be empty) the longest cached
  /// prefix of `tokens` of at most `max_positions` positions, in whole chunks.
  /// Never throws for store faults (see the policy above).
  [[nodiscard]] RemoteFetch fetch_prefix(std::span<const int32_t> tokens, size_t max_positions,
                                         FullTier& tier, uint64_t id);

  /// Queues the complete chunks of `tokens` from chunk `first_chunk` on, read from
  /// request `id` of `tier` (which holds at least those positions), for publishing.
  /// Returns the chunks queued.
  size_t publish(std::span<const int32_t> tokens, size_t first_chunk, FullTier& tier, uint64_t id);
  /// Waits until the queue is empty (tests; the CLI before it exits).
  void flush();
  [[nodiscard]] RemotePublishStats publish_stats() const;

 private:
  void publisher_loop();

  RemoteTierConfig cfg_;
  RedisEndpoint endpoint_;
  KvCacheConfig kv_;
  ChunkLayout layout_;
  RedisClient fetch_client_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<std::string, std::string>> queue_;  // key, value
  size_t queued_bytes_ = 0;
  bool sending_ = false, stop_ = false;
  RemotePublishStats pstats_;
  std::thread publisher_;
};

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

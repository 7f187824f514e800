// What both front ends of the remote prefix cache share (the single-request
// Generator and the actor engine's scheduler): opening the store, and how much of a
// prompt's prefix may come from it.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

#include "kvtiers/compressor.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"
#include "kvtiers/remote/remote_tier.hpp"

namespace vc {

/// The remote store's settings, as GeneratorConfig and EngineConfig carry them.
struct RemoteSettings {
  std::string url;             // redis://HOST:PORT
  size_t chunk_tokens = 256;   // a multiple of the KV block size
  int ttl_seconds = 86400;     // 0: never expire
  int timeout_ms = 1000;       // connect, and each pipelined batch
  int retry_ms = 5000;         // after a store fault, skip the store this long (0: never skip)
  size_t tp_rank = 0, tp_degree = 1;  // a rank's chunks hold its KV heads (chunk keys differ)
  std::string numerics;        // Model::numerics(): KV computed another way, other keys
};

/// Throws vc::Error naming the field (remote_ttl_seconds, remote_timeout_ms,
/// remote_retry_ms) when one is out of range: a TTL of 0 (never expire) to 2^30 s, a
/// timeout of 1 to 600000 ms, a retry pause of 0 (never skip the store) to 3600000 ms.
void check_remote_settings(int ttl_seconds, int timeout_ms, int retry_ms);

/// Opens the remote tier for a model's KV layout (its fingerprint keys the chunks).
/// A bad URL or chunk size throws vc::Error in one line; the store is reached lazily.
/// `health`: shared with other tiers over the same store (null: its own).
[[nodiscard]] std::unique_ptr<RemoteTier> open_remote_tier(const RemoteSettings& s,
                                                           const KvCacheConfig& kv,
                                                           const std::filesystem::path& model_dir,
                                                           std::shared_ptr<StoreHealth> health = nullptr);

/// The most prompt positions a fetched prefix may cover: the last prompt position
/// is always computed locally (its logits start decoding); a compressor that reads
/// the observation window's queries keeps that window local too, so its statistics
/// are those of a full prefill; one that scores every prompt row's hidden state
/// (KVzap) takes nothing from the store.
[[nodiscard]] size_t remote_prefix_limit(const Compressor& c, size_t prompt_size,
                                         size_t stats_window);

struct TensorParallelRank;
/// How the ranks of `tp`'s group agree while recomputing the front
/// (meet_back_fetch): over its communicator (`tp` outlives the result).
[[nodiscard]] MeetingRanks meeting_ranks(const TensorParallelRank& tp);

}  // namespace vc

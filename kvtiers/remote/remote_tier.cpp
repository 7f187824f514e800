// Fetching a cached prefix into the full tier, and write-behind publishing (see the
// header for the fault policy).
#include "kvtiers/remote/remote_tier.hpp"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>

#include "kvtiers/remote/chunk_value.hpp"

namespace vc {

namespace {

ChunkLayout make_layout(const RemoteTierConfig& cfg, const KvCacheConfig& kv, uint64_t fp) {
  ChunkLayout l;
  l.model_fingerprint = fp;
  l.numerics = XXH3_64bits(cfg.numerics.data(), cfg.numerics.size());
  l.num_layers = kv.num_layers;
  l.kv_heads = kv.kv_heads;
  l.head_dim = kv.head_dim;
  l.block_tokens = kv.block_tokens;
  l.dtype = kv.dtype;
  l.tp_rank = cfg.tp_rank;
  l.tp_degree = cfg.tp_degree;
  l.chunk_tokens = cfg.chunk_tokens;
  if (cfg.chunk_tokens == 0 || cfg.chunk_tokens % kv.block_tokens != 0)
    throw Error("remote tier: chunk tokens (" + std::to_string(cfg.chunk_tokens) +
                ") must be a positive multiple of the KV block size (" +
                std::to_string(kv.block_tokens) + ")");
  return l;
}

size_t block_bytes(const ChunkLayout& l) {
  return l.block_tokens * l.kv_heads * l.head_dim * dtype_size(l.dtype);
}

}  // namespace

RemoteTier::RemoteTier(const RemoteTierConfig& cfg, const KvCacheConfig& kv, uint64_t model_fingerprint,
                       std::shared_ptr<StoreHealth> health)
    : cfg_(cfg), endpoint_(parse_redis_url(cfg.url)), kv_(kv),
      layout_(make_layout(cfg, kv, model_fingerprint)),
      fetch_client_(endpoint_, cfg.timeouts, cfg.connections),
      health_(health ? std::move(health) : std::make_shared<StoreHealth>(cfg.retry_after)) {
  publisher_ = std::thread([this] { publisher_loop(); });
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  publisher_.join();
}

template <class Accept>
void RemoteTier::fetch_run(const std::vector<std::string>& keys, size_t begin, size_t limit,
                           Accept&& accept, size_t& chunks, size_t& bytes, std::string& stop_reason,
                           const FetchRunOptions& opt) {
  if (begin >= limit) return;
  if (std::string skip = health_->skip_reason(); !skip.empty()) {
    stop_reason = std::move(skip);
    return;
  }
  for (size_t first = begin; first < limit;) {
    const size_t w = opt.window_at ? opt.window_at(first) : opt.window > 0 ? opt.window : cfg_.fetch_window;
    const size_t n = std::min(std::max<size_t>(1, w), limit - first);
    std::vector<RedisCommand> cmds;
    for (size_t i = first; i < first + n; ++i) cmds.push_back({"GET", keys[i]});
    std::vector<RedisReply> replies;
    try {
      replies = fetch_client_.pipeline(cmds);
      health_->answered();
    } catch (const RedisError& e) {
      stop_reason = e.what();
      health_->failed(e.what());
      return;
    }
    if (opt.received != nullptr)
      for (const RedisReply& r : replies)
        if (r.type == RedisReply::Type::string) *opt.received += r.str.size();
    for (size_t j = 0; j < n; ++j) {
      const size_t c = first + j;
      const auto chunk = [&] { return "chunk " + std::to_string(opt.down_from > 0 ? opt.down_from - 1 - c : c); };
      RedisReply& r = replies[j];  // `accept` may take the value over
      if (r.type != RedisReply::Type::string) {
        stop_reason = r.type == RedisReply::Type::error ? chunk() + ": store error: " + r.str
                                                        : chunk() + " not in the store";
        return;
      }
      std::string why;
      const size_t size = r.str.size();
      if (!accept(c, r.str, why)) {
        stop_reason = chunk() + " rejected: " + why;
        return;
      }
      chunks += 1;
      bytes += size;
    }
    first += n;
  }
}

RemoteFetch RemoteTier::fetch_prefix(std::span<const int32_t> tokens, size_t max_positions,
                                     FullTier& tier, uint64_t id, size_t from_positions) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t T = layout_.chunk_tokens;
  if (from_positions % T != 0)
    throw Error("remote tier: a fetch from position " + std::to_string(from_positions) +
                ", not a multiple of the chunk size " + std::to_string(T));
  if (from_positions > 0 && tier.length(id) != from_positions)
    throw Error("remote tier: a fetch from position " + std::to_string(from_positions) +
                " into request " + std::to_string(id) + ", which holds " +
                std::to_string(tier.length(id)) + " positions");
  RemoteFetch out;
  out.positions = from_positions;
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t limit = std::min(keys.size(), max_positions / T);
  const size_t cb = T / layout_.block_tokens;
  const size_t region = cb * block_bytes(layout_);  // one layer's K (or V) of a chunk
  std::vector<std::string> store_keys;
  for (size_t i = 0; i < limit; ++i) store_keys.push_back(i < from_positions / T ? std::string() : full_chunk_key(keys[i]));
  fetch_run(
      store_keys, from_positions / T, limit,
      [&](size_t c, const std::string& value, std::string& why) {
        const std::span<const std::byte> payload =
            decode_chunk_value(value, layout_, keys[c], ChunkKind::full, why);
        if (payload.empty()) return false;
        for (size_t l = 0; l < layout_.num_layers; ++l) {
          const std::byte* k = payload.data() + 2 * l * region;
          tier.write_blocks(id, l, c * cb, cb, k, k + region);
        }
        return true;
      },
      out.chunks, out.bytes_full, out.stop_reason);
  out.positions += out.chunks * T;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

RemoteCompressedFetch RemoteTier::fetch_compressed(std::span<const int32_t> tokens,
                                                   size_t max_positions,
                                                   const std::string& compressor_spec,
                                                   size_t from_positions) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t T = layout_.chunk_tokens;
  if (from_positions % T != 0)
    throw Error("remote tier: a compressed fetch from position " + std::to_string(from_positions) +
                ", not a multiple of the chunk size " + std::to_string(T));
  RemoteCompressedFetch out;
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t limit = std::min(keys.size(), max_positions / T);
  std::vector<std::string> store_keys;
  for (size_t i = 0; i < limit; ++i)
    store_keys.push_back(i < from_positions / T ? std::string() : compressed_chunk_key(keys[i], compressor_spec));
  fetch_run(
      store_keys, from_positions / T, limit,
      [&](size_t c, const std::string& value, std::string& why) {
        const std::span<const std::byte> payload = decode_chunk_value(
            value, layout_, compressed_chunk_id(keys[c], compressor_spec), ChunkKind::compressed, why);
        if (payload.empty()) return false;
        std::optional<CompressedView> piece = CompressedView::deserialize(payload, why);
        if (!piece) return false;
        if (piece->layers() != layout_.num_layers || piece->kv_heads() != layout_.kv_heads ||
            piece->head_dim() != layout_.head_dim || piece->first() != c * T ||
            piece->covered() != (c + 1) * T) {
          why = "compressed view of another shape or positions";
          return false;
        }
        if (!out.view) {
          out.view = std::move(piece);
          return true;
        }
        return out.view->append(*piece, why);
      },
      out.chunks, out.bytes, out.stop_reason);
  out.positions = from_positions + out.chunks * T;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

size_t RemoteTier::count_compressed(std::span<const int32_t> tokens, size_t max_positions,
                                    const std::string& compressor_spec) {
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t limit = std::min(keys.size(), max_positions / layout_.chunk_tokens);
  std::vector<std::string> store_keys;
  for (size_t i = 0; i < limit; ++i) store_keys.push_back(compressed_chunk_key(keys[i], compressor_spec));
  return count_run(store_keys);
}

size_t RemoteTier::count_full(std::span<const int32_t> tokens, size_t max_positions) {
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t limit = std::min(keys.size(), max_positions / layout_.chunk_tokens);
  std::vector<std::string> store_keys;
  for (size_t i = 0; i < limit; ++i) store_keys.push_back(full_chunk_key(keys[i]));
  return count_run(store_keys);
}

RemoteBackFetch RemoteTier::fetch_back(std::span<const int32_t> tokens, size_t max_positions,
                                       const std::function<bool(size_t, std::string&&, size_t)>& take,
                                       const std::function<size_t(size_t)>& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t limit = std::min(keys.size(), max_positions / layout_.chunk_tokens);
  std::vector<std::string> store_keys;
  for (size_t i = 0; i < limit; ++i) store_keys.push_back(full_chunk_key(keys[i]));
  RemoteBackFetch out;
  out.end = out.first = count_run(store_keys);
  if (out.end < limit) {  // where the cached prefix ends, and why
    const std::string skip = health_->skip_reason();
    out.stop_reason = !skip.empty() ? skip : "chunk " + std::to_string(out.end) + " not in the store";
  }
  // From the last chunk down: position i of the run is chunk end - 1 - i.
  std::vector<std::string> down(store_keys.rend() - std::ptrdiff_t(out.end), store_keys.rend());
  size_t chunks = 0, accepted_bytes = 0;
  bool met = false;
  FetchRunOptions opt;
  opt.window = std::max<size_t>(1, cfg_.back_fetch_window);
  opt.down_from = out.end;  // the stop reasons name the chunk, not its place in `down`
  opt.received = &out.bytes;
  if (batch) opt.window_at = [&](size_t i) { return batch(out.end - 1 - i); };
  fetch_run(
      down, 0, down.size(),
      [&](size_t i, std::string& value, std::string& why) {
        const size_t c = out.end - 1 - i;
        const std::span<const std::byte> payload = decode_chunk_value(value, layout_, keys[c], ChunkKind::full, why);
        if (payload.empty()) return false;
        const size_t offset = size_t(payload.data() - reinterpret_cast<const std::byte*>(value.data()));
        if (!take(c, std::move(value), offset)) {
          met = true;
          return false;
        }
        out.first = c;
        return true;
      },
      chunks, accepted_bytes, out.stop_reason, opt);
  if (met) out.stop_reason = "";  // the caller's own prefill reached the run
  out.failed_at = !met && out.first > 0 ? out.first - 1 : out.end;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void append_back_chunks(const ChunkLayout& layout, const RemoteBackFetch& back, size_t from, FullTier& tier,
                        uint64_t id) {
  const size_t T = layout.chunk_tokens, cb = T / layout.block_tokens;
  const size_t region = cb * block_bytes(layout);  // one layer's K (or V) of a chunk
  if (from < back.first || tier.length(id) != from * T)
    throw Error("remote tier: appending fetched chunks [" + std::to_string(back.first) + ", " +
                std::to_string(back.end) + ") from chunk " + std::to_string(from) + " to request " +
                std::to_string(id) + ", which holds " + std::to_string(tier.length(id)) + " positions");
  for (size_t c = from; c < back.end; ++c) {
    const auto& [value, offset] = back.values[c - back.first];
    const std::byte* payload = reinterpret_cast<const std::byte*>(value.data()) + offset;
    for (size_t l = 0; l < layout.num_layers; ++l) {
      const std::byte* k = payload + 2 * l * region;
      tier.write_blocks(id, l, c * cb, cb, k, k + region);
    }
  }
}

void write_chunk_ahead(const ChunkLayout& layout, size_t c, const std::string& value, size_t payload_offset,
                       FullTier& tier, uint64_t id) {
  const size_t cb = layout.chunk_tokens / layout.block_tokens;
  const size_t region = cb * block_bytes(layout);  // one layer's K (or V) of a chunk
  const std::byte* payload = reinterpret_cast<const std::byte*>(value.data()) + payload_offset;
  std::vector<const std::byte*> k(layout.num_layers), v(layout.num_layers);
  for (size_t l = 0; l < layout.num_layers; ++l) {
    k[l] = payload + 2 * l * region;
    v[l] = k[l] + region;
  }
  tier.write_blocks_ahead(id, c * cb, cb, k, v);
}

size_t RemoteTier::count_run(const std::vector<std::string>& store_keys) {
  if (!health_->skip_reason().empty()) return 0;
  const size_t limit = store_keys.size();
  size_t n = 0;
  for (size_t first = 0; first < limit;) {
    const size_t w = std::min(std::max<size_t>(1, cfg_.fetch_window), limit - first);
    std::vector<RedisCommand> cmds;
    for (size_t i = first; i < first + w; ++i) cmds.push_back({"EXISTS", store_keys[i]});
    std::vector<RedisReply> replies;
    try {
      replies = fetch_client_.pipeline(cmds);
      health_->answered();
    } catch (const RedisError& e) {
      health_->failed(e.what());
      return n;
    }
    for (const RedisReply& r : replies) {
      if (r.type != RedisReply::Type::integer || r.integer != 1) return n;
      ++n;
    }
    first += w;
  }
  return n;
}

bool RemoteTier::enqueue(std::string key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + value.size() > cfg_.publish_queue_bytes) return false;
    queued_bytes_ += value.size();
    queue_.emplace_back(std::move(key), std::move(value));
    pstats_.queued += 1;
  }
  cv_.notify_all();
  return true;
}

size_t RemoteTier::publish_compressed(std::span<const int32_t> tokens, size_t first_chunk,
                                      const CompressedView& view, const std::string& compressor_spec) {
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  const size_t T = layout_.chunk_tokens;
  size_t queued = 0;
  for (size_t c = first_chunk; c < keys.size() && (c + 1) * T <= view.covered(); ++c) {
    std::string why;
    const std::optional<CompressedView> piece = view.slice(c * T, (c + 1) * T, why);
    if (!piece) {
      std::lock_guard<std::mutex> lock(mu_);
      pstats_.compressed_uncuttable += keys.size() - c;
      break;
    }
    const std::string payload = piece->serialize();
    std::string value = encode_chunk_value(
        layout_, compressed_chunk_id(keys[c], compressor_spec), ChunkKind::compressed,
        std::as_bytes(std::span<const char>(payload.data(), payload.size())));
    if (!enqueue(compressed_chunk_key(keys[c], compressor_spec), std::move(value))) {
      std::lock_guard<std::mutex> lock(mu_);
      pstats_.dropped_full_queue += keys.size() - c;
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    pstats_.compressed_queued += 1;
    ++queued;
  }
  return queued;
}

size_t RemoteTier::publish(std::span<const int32_t> tokens, size_t first_chunk, FullTier& tier,
                           uint64_t id) {
  const std::vector<ChunkKey> keys = chunk_keys(layout_, tokens);
  if (first_chunk >= keys.size()) return 0;  // nothing to read: no buffers either
  const size_t cb = layout_.chunk_tokens / layout_.block_tokens;
  const size_t region = cb * block_bytes(layout_);
  std::vector<std::byte> payload(2 * layout_.num_layers * region);
  std::vector<std::byte> k(tier.staging_bytes(layout_.chunk_tokens)), v(k.size());
  size_t queued = 0;
  for (size_t c = first_chunk; c < keys.size(); ++c) {
    if ((c + 1) * layout_.chunk_tokens > tier.length(id)) break;
    for (size_t l = 0; l < layout_.num_layers; ++l) {
      tier.read_blocks(id, l, c * cb, cb, k.data(), v.data());
      std::memcpy(payload.data() + 2 * l * region, k.data(), region);
      std::memcpy(payload.data() + (2 * l + 1) * region, v.data(), region);
    }
    if (!enqueue(full_chunk_key(keys[c]),
                 encode_chunk_value(layout_, keys[c], ChunkKind::full, payload))) {
      std::lock_guard<std::mutex> lock(mu_);
      pstats_.dropped_full_queue += keys.size() - c;
      break;
    }
    ++queued;
  }
  return queued;
}

void RemoteTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !sending_; });
}

RemotePublishStats RemoteTier::publish_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pstats_;
}

void RemoteTier::publisher_loop() {
  RedisClient client(endpoint_, cfg_.timeouts, 1);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::vector<std::pair<std::string, std::string>> batch;
    while (!queue_.empty() && batch.size() < 16) {
      queued_bytes_ -= queue_.front().second.size();
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    sending_ = true;
    lock.unlock();
    std::vector<RedisCommand> cmds;
    for (auto& [key, value] : batch) {
      RedisCommand c{"SET", key, std::move(value)};
      if (cfg_.ttl_seconds > 0) {
        c.push_back("EX");
        c.push_back(std::to_string(cfg_.ttl_seconds));
      }
      cmds.push_back(std::move(c));
    }
    size_t sent = 0, failed = 0, skipped = 0;
    if (!health_->skip_reason().empty()) {
      failed = skipped = cmds.size();  // the store failed a moment ago: do not wait on it
    } else {
      try {
        for (const RedisReply& r : client.pipeline(cmds))
          (r.type == RedisReply::Type::status ? sent : failed) += 1;
        health_->answered();
      } catch (const RedisError& e) {
        failed = cmds.size();
        health_->failed(e.what());
      }
    }
    lock.lock();
    sending_ = false;
    pstats_.sent += sent;
    pstats_.failed += failed;
    pstats_.skipped_store_down += skipped;
    if (failed > 0 && stop_) {  // shutting down with a failing store: do not wait on it again
      pstats_.failed += queue_.size();
      queue_.clear();
      queued_bytes_ = 0;
    }
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

namespace {

// A cursor the server hands out twice would make the loop run forever (a server
// that only speaks the protocol; Redis never repeats one within a scan): refused.
template <class F>
void scan_keys(RedisClient& client, F&& each_batch) {
  std::string cursor = "0";
  std::unordered_set<std::string> seen;
  do {
    if (cursor != "0" && !seen.insert(cursor).second)
      throw RedisError("remote store " + client.endpoint().url() + ": SCAN returned cursor " + cursor +
                       " twice; its iteration would not end");
    const RedisReply r =
        client.command({"SCAN", cursor, "MATCH", std::string(kRemoteKeyPrefix) + "*", "COUNT", "1000"});
    if (r.type != RedisReply::Type::array || r.elements.size() != 2)
      throw RedisError("remote store " + client.endpoint().url() + ": unexpected SCAN reply");
    cursor = r.elements[0].str;
    std::vector<std::string> keys;
    for (const RedisReply& k : r.elements[1].elements) keys.push_back(k.str);
    if (!keys.empty()) each_batch(keys);
  } while (cursor != "0");
}

}  // namespace

std::string compressor_spec(const std::string& name,
                            const std::vector<std::pair<std::string, double>>& settings, double ratio) {
  std::string s = name;
  char buf[64];
  for (const auto& [k, v] : settings) {
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    s += ";" + k + "=" + buf;
  }
  std::snprintf(buf, sizeof(buf), "%.17g", ratio);
  return s + ";ratio=" + buf;
}

RemoteStoreStats remote_store_stats(const RedisEndpoint& ep, RedisTimeouts t) {
  RedisClient client(ep, t, 1);
  RemoteStoreStats s;
  scan_keys(client, [&](const std::vector<std::string>& keys) {
    std::vector<RedisCommand> cmds;
    for (const std::string& k : keys) {
      (k.rfind(std::string(kRemoteKeyPrefix) + "full:", 0) == 0 ? s.full_chunks : s.compressed_chunks) += 1;
      cmds.push_back({"STRLEN", k});
    }
    for (const RedisReply& r : client.pipeline(cmds)) s.value_bytes += size_t(std::max(0LL, r.integer));
  });
  const RedisReply info = client.command({"INFO", "memory"});
  const std::string tag = "used_memory_human:";
  const size_t at = info.str.find(tag);
  if (at != std::string::npos) {
    const size_t e = info.str.find_first_of("\r\n", at);
    s.used_memory_human = info.str.substr(at + tag.size(), e - at - tag.size());
  }
  return s;
}

size_t remote_store_clear(const RedisEndpoint& ep, RedisTimeouts t) {
  RedisClient client(ep, t, 1);
  size_t n = 0;
  std::vector<std::string> all;
  scan_keys(client, [&](const std::vector<std::string>& keys) { all.insert(all.end(), keys.begin(), keys.end()); });
  for (size_t b = 0; b < all.size(); b += 500) {
    RedisCommand cmd{"UNLINK"};
    cmd.insert(cmd.end(), all.begin() + b, all.begin() + std::min(all.size(), b + 500));
    n += size_t(std::max(0LL, client.command(cmd).integer));
  }
  return n;
}

}  // namespace vc

// The CUDA attention backend's copies of paged caches (attend_cached, and the tails
// of attend_views): one per cache in device memory, all its layers' K and V as the
// host lays them out, kept current block by block (KvMirror: only blocks written
// since their last copy go up again), growing with the highest block a pass reads,
// and freed once the cache is gone.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/kv_mirror.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/cuda/device_buffer.hpp"

namespace vc::cuda_backend {

/// A cache's copy in device memory: all its layers' K and V, as the host lays them
/// out ([layers][K, V][held * block bytes]), for blocks [0, held), and what is
/// current. It grows with the highest block a pass reads (the pool hands out low
/// ids first and reuses freed ones first), so it holds about the blocks in use,
/// not the cache's whole capacity.
struct CacheCopy {
  std::mutex mu;  // one pass at a time over a copy
  std::unique_ptr<KvMirror> blocks;
  DeviceBuffer storage;
  size_t held = 0;         // blocks the copy has room for
  size_t layer_bytes = 0;  // held * block bytes
  std::atomic<size_t> bytes{0};  // storage's, for bytes() without `mu`

  /// Makes room for blocks [0, need) (at least doubling, at most the cache's
  /// capacity), keeping what it holds: a new buffer, each layer's K and V copied
  /// over on the device through `stream`. The caller holds `mu`; `dev` names the
  /// device in errors.
  void grow(const std::string& dev, const KvCacheConfig& cfg, size_t need, cudaStream_t stream) {
    if (need <= held) return;
    const size_t block_bytes = cfg.kv_heads * cfg.block_tokens * cfg.head_dim * dtype_size(cfg.dtype);
    const size_t new_held = std::min(cfg.num_blocks, std::max({need, 2 * held, size_t(64)}));
    const size_t new_layer_bytes = new_held * block_bytes, total = new_layer_bytes * 2 * cfg.num_layers;
    DeviceBuffer bigger;
    if (const cudaError_t e = bigger.reserve(total); e != cudaSuccess)
      throw Error("device " + dev + ": the KV cache's copy (" + std::to_string(new_held) + " blocks, " +
                  std::to_string(total >> 20) + " MiB) does not fit in its memory: " + cuda_error(e));
    for (size_t i = 0; i < 2 * cfg.num_layers && held > 0; ++i) {  // [layer][K, V] regions
      const cudaError_t e = cudaMemcpyAsync(static_cast<std::byte*>(bigger.get()) + i * new_layer_bytes,
                                            static_cast<const std::byte*>(storage.get()) + i * layer_bytes,
                                            layer_bytes, cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess) throw Error("device " + dev + ": growing the KV cache's copy: " + cuda_error(e));
    }
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
      throw Error("device " + dev + ": growing the KV cache's copy: " + cuda_error(e));
    storage = std::move(bigger);
    held = new_held, layer_bytes = new_layer_bytes;
    bytes = storage.bytes();
  }
};

class CacheCopies {
 public:
  /// The copy of `cache`, made (empty) on first use. Copies of caches that are gone
  /// are dropped here, and freed once the lock is let go (cudaFree waits for the
  /// whole device; other threads' passes need the lock meanwhile).
  std::shared_ptr<CacheCopy> of(const PagedKvCache& cache) {
    std::vector<std::shared_ptr<CacheCopy>> dropped;  // destroyed after `lock`
    std::lock_guard lock(mu_);
    for (auto it = copies_.begin(); it != copies_.end();) {
      if (!it->second->blocks->expired()) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(it->second));
      it = copies_.erase(it);
    }
    if (const auto it = copies_.find(cache.id()); it != copies_.end()) return it->second;
    auto fresh = std::make_shared<CacheCopy>();  // empty: grown by the passes that read it
    fresh->blocks = std::make_unique<KvMirror>(cache);
    copies_.emplace(cache.id(), fresh);
    return fresh;
  }

  /// Drops the copy of cache `cache_id` (rebuilt on its next use).
  void forget(uint64_t cache_id) {
    std::shared_ptr<CacheCopy> dropped;  // freed once `mu_` is let go
    std::lock_guard lock(mu_);
    if (const auto it = copies_.find(cache_id); it != copies_.end()) {
      dropped = std::move(it->second);
      copies_.erase(it);
    }
  }

  /// Bytes of the copies held.
  [[nodiscard]] size_t bytes() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [id, c] : copies_) n += c->bytes.load();
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<CacheCopy>> copies_;  // by cache id
};

}  // namespace vc::cuda_backend

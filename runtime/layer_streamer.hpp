// Streams a request's full KV from a full tier, one layer at a time, into two
// staging buffers (double buffering): while the verify pass computes layer l, a
// worker thread reads layer l+1. This is the PCIe pattern of the GPU path; on a
// CPU-only machine the "link" is host memory or the disk, optionally throttled to a
// modelled bandwidth.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "runtime/forward.hpp"

namespace vc {

class LayerStreamer final : public LayerKvProvider {
 public:
  explicit LayerStreamer(FullTier& tier);
  ~LayerStreamer() override;
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  /// Models a slower link: each layer read takes at least bytes / bytes_per_second
  /// (0 = as fast as the tier delivers).
  void set_link_bandwidth(double bytes_per_second) { link_bps_ = bytes_per_second; }
  /// Called on the copy thread after each layer lands (tracing).
  using LayerObserver = std::function<void(uint64_t id, size_t layer,
                                           std::chrono::steady_clock::time_point begin,
                                           std::chrono::steady_clock::time_point end, size_t bytes)>;
  void set_layer_observer(LayerObserver f) { observer_ = std::move(f); }

  /// Prepares a pass over request `id`: the tier holds positions [0, n_full); the
  /// pass writes rows at positions [n_full, n_full + n_rows). Starts reading layer 0.
  void start(uint64_t id, size_t n_full, size_t n_rows);

  void begin_layer(size_t layer) override;
  void write(size_t layer, size_t pos, const float* k_row, const float* v_row) override;
  [[nodiscard]] cpu::PagedKv view(size_t layer) const override;
  void end_layer(size_t layer) override;

  /// The K and V the pass wrote for row r (position n_full + r) of `layer`, fp32
  /// ([kv_heads, head_dim] each), for committing to the tiers.
  [[nodiscard]] const float* row_k(size_t layer, size_t r) const;
  [[nodiscard]] const float* row_v(size_t layer, size_t r) const;

  /// Seconds the pass spent waiting for layers to land, and bytes read, since
  /// construction.
  [[nodiscard]] double wait_seconds() const { return wait_seconds_; }
  [[nodiscard]] size_t bytes_streamed() const { return bytes_streamed_; }

 private:
  void worker();
  void request_read(size_t layer);

  FullTier& tier_;
  KvCacheConfig cfg_;
  KvStaging staging_[2];
  size_t row_floats_ = 0;
  std::vector<float> rows_k_, rows_v_;  // [layers][n_rows][kv_heads * head_dim]
  uint64_t id_ = 0;
  size_t n_full_ = 0, n_rows_ = 0;
  double link_bps_ = 0;
  LayerObserver observer_;
  double wait_seconds_ = 0;
  size_t bytes_streamed_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  long pending_ = -1;     // layer the worker should read next (-1: none)
  long ready_[2] = {-1, -1};  // layer staged in each buffer
  std::string error_;     // a read failure, rethrown on the computing thread
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vc

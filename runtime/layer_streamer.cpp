// Double-buffered layer streaming from a full tier on one worker thread.
#include "runtime/layer_streamer.hpp"

#include <chrono>
#include <cstring>

#include "kernels/error.hpp"

namespace vc {

using steady = std::chrono::steady_clock;

LayerStreamer::LayerStreamer(FullTier& tier)
    : tier_(tier), cfg_(tier.config()), staging_{KvStaging(cfg_), KvStaging(cfg_)},
      row_floats_(cfg_.kv_heads * cfg_.head_dim), thread_([this] { worker(); }) {}

LayerStreamer::~LayerStreamer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LayerStreamer::start(uint64_t id, size_t n_full, size_t n_rows) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ < 0; });  // a previous read still in flight
  id_ = id;
  n_full_ = n_full;
  n_rows_ = n_rows;
  staging_[0].reserve(n_full + n_rows);
  staging_[1].reserve(n_full + n_rows);
  rows_k_.assign(cfg_.num_layers * n_rows * row_floats_, 0.f);
  rows_v_.assign(rows_k_.size(), 0.f);
  ready_[0] = ready_[1] = -1;
  error_.clear();
  pending_ = 0;
  lock.unlock();
  cv_.notify_all();
}

void LayerStreamer::request_read(size_t layer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = long(layer);
  }
  cv_.notify_all();
}

void LayerStreamer::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_ >= 0; });
    if (stop_) return;
    const size_t layer = size_t(pending_);
    KvStaging& buf = staging_[layer % 2];
    const uint64_t id = id_;
    const size_t n = n_full_;
    lock.unlock();
    std::string err;
    const auto t0 = steady::now();
    try {
      if (n > 0) tier_.read_layer(id, layer, n, buf.k(), buf.v());
      const double bytes = double(n) * double(tier_.bytes_per_token()) / double(cfg_.num_layers);
      if (link_bps_ > 0) {  // modelled link: a layer takes at least bytes / bandwidth
        const auto until = t0 + std::chrono::duration<double>(bytes / link_bps_);
        std::this_thread::sleep_until(until);
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
    const size_t layer_bytes = n * tier_.bytes_per_token() / cfg_.num_layers;
    if (observer_) observer_(id, layer, t0, steady::now(), layer_bytes);
    lock.lock();
    bytes_streamed_ += layer_bytes;
    ready_[layer % 2] = long(layer);
    if (!err.empty()) error_ = err;
    pending_ = -1;
    cv_.notify_all();
  }
}

void LayerStreamer::begin_layer(size_t layer) {
  const auto t0 = steady::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_[layer % 2] == long(layer) && pending_ < 0; });
  wait_seconds_ += std::chrono::duration<double>(steady::now() - t0).count();
  if (!error_.empty()) throw Error("verify: reading the full KV failed: " + error_);
  if (layer + 1 < cfg_.num_layers) {
    pending_ = long(layer + 1);  // prefetch the next layer into the other buffer
    lock.unlock();
    cv_.notify_all();
  }
}

void LayerStreamer::write(size_t layer, size_t pos, const float* k_row, const float* v_row) {
  if (pos < n_full_ || pos >= n_full_ + n_rows_)
    throw Error("verify: row position " + std::to_string(pos) + " is outside the pass");
  KvStaging& buf = staging_[layer % 2];
  const size_t bt = cfg_.block_tokens, D = cfg_.head_dim, esz = dtype_size(cfg_.dtype);
  for (size_t h = 0; h < cfg_.kv_heads; ++h) {
    const size_t off = (((pos / bt) * cfg_.kv_heads + h) * bt + pos % bt) * D * esz;
    from_f32(cfg_.dtype, k_row + h * D, static_cast<std::byte*>(buf.k()) + off, D);
    from_f32(cfg_.dtype, v_row + h * D, static_cast<std::byte*>(buf.v()) + off, D);
  }
  const size_t r = pos - n_full_;
  std::memcpy(&rows_k_[(layer * n_rows_ + r) * row_floats_], k_row, row_floats_ * sizeof(float));
  std::memcpy(&rows_v_[(layer * n_rows_ + r) * row_floats_], v_row, row_floats_ * sizeof(float));
}

cpu::PagedKv LayerStreamer::view(size_t layer) const { return staging_[layer % 2].view(); }

void LayerStreamer::end_layer(size_t layer) { (void)layer; }

const float* LayerStreamer::row_k(size_t layer, size_t r) const {
  return &rows_k_[(layer * n_rows_ + r) * row_floats_];
}
const float* LayerStreamer::row_v(size_t layer, size_t r) const {
  return &rows_v_[(layer * n_rows_ + r) * row_floats_];
}

}  // namespace vc

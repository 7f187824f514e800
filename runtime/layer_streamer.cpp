// Double-buffered, chunked streaming from a full tier on one worker thread. Steps
// (layer * chunks + chunk) are read in order into buffer step % 2 (or borrowed from
// the tier, the buffer then holding the loan) once the pass has released what that
// buffer held; the pass acquires them in the same order.
#include "runtime/layer_streamer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/error.hpp"

namespace vc {

using steady = std::chrono::steady_clock;

LayerStreamer::LayerStreamer(FullTier& tier, size_t chunk_positions)
    : tier_(tier), cfg_(tier.config()), chunk_positions_(chunk_positions),
      buf_{Buffer{KvStaging(cfg_), {}, -1, true, std::nullopt}, Buffer{KvStaging(cfg_), {}, -1, true, std::nullopt}},
      row_floats_(cfg_.kv_heads * cfg_.head_dim), thread_([this] { worker(); }) {}

LayerStreamer::~LayerStreamer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LayerStreamer::set_budget(FastMemory* budget) {
  std::lock_guard<std::mutex> lock(mu_);
  staging_charge_ = FastCharge(budget, staging_bytes_, "verify staging buffers");
}

size_t LayerStreamer::staging_bytes_for(size_t n_pos) const {
  const size_t bt = cfg_.block_tokens;
  const size_t blocks = (n_pos + bt - 1) / bt;
  const size_t per = chunk_positions_ == 0 ? blocks : std::min(blocks, (chunk_positions_ + bt - 1) / bt);
  return 2 * 2 * tier_.staging_bytes(per * bt);  // two buffers of K and V
}

void LayerStreamer::start(uint64_t id, size_t n_full, size_t n_rows, bool whole_layers) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !reading_; });  // a read of an earlier pass still in flight
  const size_t bt = cfg_.block_tokens;
  id_ = id;
  n_full_ = n_full;
  n_rows_ = n_rows;
  n_blocks_ = (n_full + n_rows + bt - 1) / bt;
  chunk_blocks_ = chunk_positions_ == 0 || whole_layers ? std::max<size_t>(1, n_blocks_)
                                        : std::max<size_t>(1, (chunk_positions_ + bt - 1) / bt);
  n_chunks_ = (n_blocks_ + chunk_blocks_ - 1) / chunk_blocks_;
  size_t bytes = 0;
  const size_t want = std::min(chunk_blocks_, n_blocks_) * bt;
  for (Buffer& b : buf_) {
    // Staging follows the pass: a whole-layer pass over a long context must not
    // leave its buffers behind for the chunked passes after it.
    if (b.staging.capacity() > 2 * want + 4 * bt) b.staging = KvStaging(cfg_);
    b.staging.reserve(want);
    b.table.assign(n_blocks_, -1);
    b.step = -1;
    b.consumed = true;
    b.lent.reset();
    bytes += 2 * tier_.staging_bytes(b.staging.capacity());
  }
  if (bytes != staging_bytes_) {
    try {
      staging_charge_.resize(bytes, "staging buffers of a pass over " +
                                        std::to_string(n_full + n_rows) + " positions");
    } catch (...) {  // no pass: hold nothing
      for (Buffer& b : buf_) b.staging = KvStaging(cfg_);
      staging_charge_.resize(0, "");
      staging_bytes_ = 0;
      total_steps_ = next_read_ = 0;
      throw;
    }
  }
  staging_bytes_ = bytes;
  rows_k_.assign(cfg_.num_layers * n_rows * row_floats_, 0.f);
  rows_v_.assign(rows_k_.size(), 0.f);
  error_.clear();
  ++generation_;
  next_read_ = 0;
  total_steps_ = long(cfg_.num_layers * n_chunks_);
  lock.unlock();
  cv_.notify_all();
}

void LayerStreamer::free_buffers() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !reading_; });
  total_steps_ = next_read_;  // nothing more of this pass is read
  for (Buffer& b : buf_) {
    b.staging = KvStaging(cfg_);
    b.table.clear();
    b.step = -1;
    b.consumed = true;
    b.lent.reset();
  }
  staging_charge_.resize(0, "");
  staging_bytes_ = 0;
  std::vector<float>().swap(rows_k_);
  std::vector<float>().swap(rows_v_);
}

std::pair<size_t, size_t> LayerStreamer::chunk_blocks(size_t c) const {
  const size_t b = c * chunk_blocks_;
  return {b, std::min(n_blocks_, b + chunk_blocks_)};
}

void LayerStreamer::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // The next step's buffer must hold nothing the pass still uses.
    cv_.wait(lock, [&] {
      if (stop_) return true;
      if (next_read_ >= total_steps_) return false;
      const Buffer& b = buf_[next_read_ % 2];
      return b.step < 0 || b.consumed;
    });
    if (stop_) return;
    const long step = next_read_;
    Buffer& buf = buf_[step % 2];
    const size_t layer = size_t(step) / n_chunks_, c = size_t(step) % n_chunks_;
    const auto [bb, be] = chunk_blocks(c);
    const size_t held_blocks = (n_full_ + cfg_.block_tokens - 1) / cfg_.block_tokens;
    const size_t read_end = std::min(be, held_blocks);
    const uint64_t id = id_;
    const size_t n_full = n_full_;
    buf.step = -1;
    reading_ = true;
    lock.unlock();

    std::string err;
    const auto t0 = steady::now();
    size_t bytes = 0;
    std::optional<FullTier::LentBlocks> lent;
    try {
      if (read_end > bb) {
        // Whole blocks below the pass's rows: nothing to overlay, so borrowable.
        if (be * cfg_.block_tokens <= n_full) lent = tier_.lend_blocks(id, layer, bb, be - bb);
        if (!lent) tier_.read_blocks(id, layer, bb, read_end - bb, buf.staging.k(), buf.staging.v());
        const size_t positions = std::min(n_full, read_end * cfg_.block_tokens) - bb * cfg_.block_tokens;
        bytes = positions * tier_.bytes_per_token() / cfg_.num_layers;
      }
      if (link_ != nullptr && bytes > 0)  // modelled link: the chunk's turn on it
        std::this_thread::sleep_until(link_->book(t0, bytes));
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (observer_ && bytes > 0) observer_(id, layer, t0, steady::now(), bytes);

    lock.lock();
    std::fill(buf.table.begin(), buf.table.end(), -1);
    for (size_t j = bb; j < be; ++j) buf.table[j] = int32_t(j - bb);
    bytes_streamed_ += bytes;
    if (lent) chunks_lent_.fetch_add(1, std::memory_order_relaxed);
    buf.lent = std::move(lent);
    if (!err.empty()) error_ = err;
    buf.step = step;
    buf.consumed = false;
    reading_ = false;
    ++next_read_;
    cv_.notify_all();
  }
}

void LayerStreamer::overlay_rows(Buffer& b, size_t layer, size_t c) {
  const auto [bb, be] = chunk_blocks(c);
  const size_t bt = cfg_.block_tokens, D = cfg_.head_dim, esz = dtype_size(cfg_.dtype);
  const size_t first = std::max(n_full_, bb * bt), last = std::min(n_full_ + n_rows_, be * bt);
  for (size_t pos = first; pos < last; ++pos) {
    const float* k = row_k(layer, pos - n_full_);
    const float* v = row_v(layer, pos - n_full_);
    for (size_t h = 0; h < cfg_.kv_heads; ++h) {
      const size_t off = (((pos / bt - bb) * cfg_.kv_heads + h) * bt + pos % bt) * D * esz;
      from_f32(cfg_.dtype, k + h * D, static_cast<std::byte*>(b.staging.k()) + off, D);
      from_f32(cfg_.dtype, v + h * D, static_cast<std::byte*>(b.staging.v()) + off, D);
    }
  }
}

KvChunk LayerStreamer::acquire(size_t layer, size_t c) {
  const long step = long(layer * n_chunks_ + c);
  const auto t0 = steady::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (c >= n_chunks_ || step >= total_steps_)
    throw Error("verify: chunk " + std::to_string(c) + " of layer " + std::to_string(layer) +
                " is outside the pass");
  Buffer& b = buf_[step % 2];
  cv_.wait(lock, [&] { return b.step == step; });
  wait_seconds_ += std::chrono::duration<double>(steady::now() - t0).count();
  if (!error_.empty()) throw Error("verify: reading the full KV failed: " + error_);
  lock.unlock();
  const auto [bb, be] = chunk_blocks(c);
  cpu::PagedKv kv = b.staging.view();
  if (b.lent) {
    kv.k = b.lent->k;
    kv.v = b.lent->v;
  } else {
    overlay_rows(b, layer, c);
  }
  kv.block_table = b.table.data();
  return KvChunk{kv, bb, be, b.lent ? b.lent->keep : nullptr};
}

void LayerStreamer::release(size_t layer, size_t c) {
  const long step = long(layer * n_chunks_ + c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Buffer& b = buf_[step % 2];
    if (b.step == step) {
      b.consumed = true;
      b.lent.reset();  // the tier may drop the chunk now
    }
  }
  cv_.notify_all();
}

cpu::PagedKv LayerStreamer::shape() const {
  return cpu::PagedKv{nullptr, nullptr, cfg_.dtype, cfg_.block_tokens, cfg_.kv_heads, cfg_.head_dim, nullptr};
}

void LayerStreamer::write(size_t layer, size_t pos, const float* k_row, const float* v_row) {
  if (pos < n_full_ || pos >= n_full_ + n_rows_)
    throw Error("verify: row position " + std::to_string(pos) + " is outside the pass");
  const size_t r = pos - n_full_;
  std::memcpy(&rows_k_[(layer * n_rows_ + r) * row_floats_], k_row, row_floats_ * sizeof(float));
  std::memcpy(&rows_v_[(layer * n_rows_ + r) * row_floats_], v_row, row_floats_ * sizeof(float));
}

const float* LayerStreamer::row_k(size_t layer, size_t r) const {
  return &rows_k_[(layer * n_rows_ + r) * row_floats_];
}
const float* LayerStreamer::row_v(size_t layer, size_t r) const {
  return &rows_v_[(layer * n_rows_ + r) * row_floats_];
}

}  // namespace vc

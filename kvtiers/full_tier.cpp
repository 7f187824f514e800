// The full tier's request bookkeeping (lengths, gaps, byte counters, errors), the
// staging buffer, and the host-memory tier. The disk tier is in full_tier_disk.cpp.
#include "kvtiers/full_tier.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "kernels/error.hpp"

namespace vc {

namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The one place host KV memory is allocated (and host_free the one place it is
// freed): page-aligned and offered to the installed pinner (kvtiers/host_pinning.hpp),
// so that a device copies lent blocks from it by DMA (cudaHostRegister pins it in
// place); zeroed, so that contents never depend on what the allocator handed back,
// before it is pinned (pinning commits every page anyway).
// `place` (may be empty) sees the memory before its first touch.
std::byte* host_alloc(size_t bytes, const std::function<void(void*, size_t)>& place) {
  void* p = nullptr;
  if (posix_memalign(&p, kTierAlign, bytes) != 0)
    throw Error("HostFullTier: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  if (place) place(p, bytes);
  std::memset(p, 0, bytes);
  pin_host(p, bytes);
  return static_cast<std::byte*>(p);
}

void host_free(std::byte* p) {
  unpin_host(p);
  std::free(p);
}

}  // namespace

// ---- KvStaging ----------------------------------------------------------------

void KvStaging::reserve(size_t n_pos) {
  if (n_pos <= capacity_) return;
  const size_t want = std::max(n_pos, 2 * capacity_);
  const size_t blocks = (want + cfg_.block_tokens - 1) / cfg_.block_tokens;
  const size_t bytes =
      round_up(blocks * cfg_.block_tokens * cfg_.kv_heads * cfg_.head_dim * dtype_size(cfg_.dtype),
               kTierAlign);
  void* k = std::aligned_alloc(kTierAlign, bytes);
  void* v = std::aligned_alloc(kTierAlign, bytes);
  if (k == nullptr || v == nullptr) {
    std::free(k);
    std::free(v);
    throw Error("KvStaging: cannot allocate 2 x " + std::to_string(bytes) + " bytes");
  }
  k_.reset(static_cast<std::byte*>(k));
  v_.reset(static_cast<std::byte*>(v));
  pin_host(k, bytes);
  pin_host(v, bytes);
  table_.resize(blocks);
  std::iota(table_.begin(), table_.end(), 0);
  capacity_ = blocks * cfg_.block_tokens;
}

cpu::PagedKv KvStaging::view() const {
  return cpu::PagedKv{k_.get(),      v_.get(),      cfg_.dtype,   cfg_.block_tokens,
                      cfg_.kv_heads, cfg_.head_dim, table_.data()};
}

// ---- FullTier -------------------------------------------------------------------

FullTier::FullTier(const KvCacheConfig& cfg) : cfg_(cfg) {
  if (cfg.num_layers == 0 || cfg.kv_heads == 0 || cfg.head_dim == 0 || cfg.block_tokens == 0)
    throw Error("FullTier: num_layers, kv_heads, head_dim and block_tokens must be positive");
  head_bytes_ = cfg.head_dim * dtype_size(cfg.dtype);
  row_bytes_ = cfg.kv_heads * head_bytes_;
}

std::string FullTier::where(uint64_t id) const {
  return std::string(kind()) + " full tier, request " + std::to_string(id);
}

FullTier::Slot& FullTier::slot(uint64_t id, const char* op) {
  return const_cast<Slot&>(std::as_const(*this).slot(id, op));
}

const FullTier::Slot& FullTier::slot(uint64_t id, const char* op) const {
  auto it = slots_.find(id);
  if (it == slots_.end())
    throw Error(std::string(kind()) + " full tier: " + op + ": unknown request " +
                std::to_string(id));
  return *it->second;
}

void FullTier::check_layer(uint64_t id, size_t layer, const char* op) const {
  if (layer >= cfg_.num_layers)
    throw Error(where(id) + ": " + op + ": layer " + std::to_string(layer) + " out of range (" +
                std::to_string(cfg_.num_layers) + " layers)");
}

void FullTier::create(uint64_t id, size_t capacity_positions) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (contains(id)) throw Error(where(id) + ": create: the request already exists");
  std::unique_ptr<Slot> s = open_slot(id, blocks_for(capacity_positions));
  s->layer_length.assign(cfg_.num_layers, 0);
  slots_.emplace(id, std::move(s));
}

void FullTier::write(uint64_t id, size_t layer, size_t pos, const float* k_row,
                     const float* v_row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "write");
  check_layer(id, layer, "write");
  if (pos > s.layer_length[layer])
    throw Error(where(id) + ": write of layer " + std::to_string(layer) + " at position " +
                std::to_string(pos) + " leaves a gap (the layer holds " +
                std::to_string(s.layer_length[layer]) + " positions)");
  check_capacity(id, s, pos + 1);
  ensure_blocks(id, s, blocks_for(pos + 1));
  const BlockRef r = block_for_write(id, s, layer, pos / cfg_.block_tokens);
  const size_t t = pos % cfg_.block_tokens;
  for (size_t h = 0; h < cfg_.kv_heads; ++h) {
    const size_t off = (h * cfg_.block_tokens + t) * head_bytes_;
    from_f32(cfg_.dtype, k_row + h * cfg_.head_dim, r.k + off, cfg_.head_dim);
    from_f32(cfg_.dtype, v_row + h * cfg_.head_dim, r.v + off, cfg_.head_dim);
  }
  s.layer_length[layer] = std::max(s.layer_length[layer], pos + 1);
  s.length = std::max(s.length, pos + 1);
  written_ += 2 * row_bytes_;
}

void FullTier::copy_from(uint64_t id, const PagedKvCache& cache, const KvSequence& seq,
                         size_t first_pos, size_t n) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "copy_from");
  const KvCacheConfig& c = cache.config();
  if (c.num_layers != cfg_.num_layers || c.kv_heads != cfg_.kv_heads ||
      c.head_dim != cfg_.head_dim || c.block_tokens != cfg_.block_tokens || c.dtype != cfg_.dtype)
    throw Error(where(id) +
                ": copy_from: the cache's shape (layers, kv_heads, head_dim, "
                "block_tokens, dtype) differs from the tier's");
  if (first_pos + n > seq.length)
    throw Error(where(id) + ": copy_from: positions [" + std::to_string(first_pos) + ", " +
                std::to_string(first_pos + n) + ") run past the sequence's length " +
                std::to_string(seq.length));
  for (size_t l = 0; l < cfg_.num_layers; ++l)
    if (first_pos > s.layer_length[l])
      throw Error(where(id) + ": copy_from at position " + std::to_string(first_pos) +
                  " leaves a gap in layer " + std::to_string(l) + " (it holds " +
                  std::to_string(s.layer_length[l]) + " positions)");
  if (n == 0) return;
  const size_t bt = cfg_.block_tokens, end = first_pos + n;
  if (blocks_for(end) > seq.blocks.size())
    throw Error(where(id) + ": copy_from: the sequence's block table is shorter than its length");
  check_capacity(id, s, end);
  ensure_blocks(id, s, blocks_for(end));
  for (size_t j = first_pos / bt; j * bt < end; ++j) {
    const size_t t0 = std::max(first_pos, j * bt) - j * bt;
    const size_t t1 = std::min(end, (j + 1) * bt) - j * bt;
    const size_t src_block = size_t(seq.blocks[j]) * block_bytes();
    for (size_t l = 0; l < cfg_.num_layers; ++l) {
      const cpu::PagedKv src = cache.view(l, seq);
      const auto* sk = static_cast<const std::byte*>(src.k) + src_block;
      const auto* sv = static_cast<const std::byte*>(src.v) + src_block;
      const BlockRef r = block_for_write(id, s, l, j);
      for (size_t h = 0; h < cfg_.kv_heads; ++h) {
        const size_t off = (h * bt + t0) * head_bytes_;
        std::memcpy(r.k + off, sk + off, (t1 - t0) * head_bytes_);
        std::memcpy(r.v + off, sv + off, (t1 - t0) * head_bytes_);
      }
    }
  }
  for (size_t& ll : s.layer_length) ll = std::max(ll, end);
  s.length = std::max(s.length, end);
  written_ += n * bytes_per_token();
}

void FullTier::write_blocks(uint64_t id, size_t layer, size_t first_block, size_t n_blocks,
                            const void* k, const void* v) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "write_blocks");
  check_layer(id, layer, "write_blocks");
  const size_t bt = cfg_.block_tokens;
  if (s.layer_length[layer] != first_block * bt)
    throw Error(where(id) + ": write_blocks of layer " + std::to_string(layer) + " at block " +
                std::to_string(first_block) + " does not append (the layer holds " +
                std::to_string(s.layer_length[layer]) + " positions)");
  if (n_blocks == 0) return;
  const size_t end = (first_block + n_blocks) * bt;
  check_capacity(id, s, end);
  ensure_blocks(id, s, first_block + n_blocks);
  for (size_t j = 0; j < n_blocks; ++j) {
    const BlockRef r = block_for_write(id, s, layer, first_block + j);
    std::memcpy(r.k, static_cast<const std::byte*>(k) + j * block_bytes(), block_bytes());
    std::memcpy(r.v, static_cast<const std::byte*>(v) + j * block_bytes(), block_bytes());
  }
  s.layer_length[layer] = end;
  s.length = std::max(s.length, end);
  written_ += n_blocks * bt * 2 * row_bytes_;
}

size_t FullTier::staging_bytes(size_t n_pos) const {
  return round_up(blocks_for(n_pos) * block_bytes(), kTierAlign);
}

void FullTier::read_layer(uint64_t id, size_t layer, size_t n_pos, void* k_out, void* v_out) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "read_layer");
  check_layer(id, layer, "read_layer");
  if (n_pos > s.layer_length[layer])
    throw Error(where(id) + ": read past the end: layer " + std::to_string(layer) + " holds " +
                std::to_string(s.layer_length[layer]) + " positions, asked for " +
                std::to_string(n_pos));
  if (n_pos == 0) return;
  if (k_out == nullptr || v_out == nullptr)
    throw Error(where(id) + ": read_layer: null staging buffer");
  read_blocks(id, s, layer, 0, blocks_for(n_pos), static_cast<std::byte*>(k_out),
              static_cast<std::byte*>(v_out));
  read_ += n_pos * 2 * row_bytes_;
}

void FullTier::read_blocks(uint64_t id, size_t layer, size_t first_block, size_t n_blocks,
                           void* k_out, void* v_out) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "read_blocks");
  check_layer(id, layer, "read_blocks");
  const size_t held = s.layer_length[layer];
  if (n_blocks == 0) return;
  if (first_block + n_blocks > blocks_for(held))
    throw Error(where(id) + ": read past the end: layer " + std::to_string(layer) + " holds " +
                std::to_string(held) + " positions, asked for blocks " +
                std::to_string(first_block) + ".." + std::to_string(first_block + n_blocks - 1));
  if (k_out == nullptr || v_out == nullptr)
    throw Error(where(id) + ": read_blocks: null staging buffer");
  read_blocks(id, s, layer, first_block, n_blocks, static_cast<std::byte*>(k_out),
              static_cast<std::byte*>(v_out));
  const size_t first_pos = first_block * cfg_.block_tokens;
  read_ += (std::min(held, (first_block + n_blocks) * cfg_.block_tokens) - first_pos) * 2 * row_bytes_;
}

std::optional<FullTier::LentBlocks> FullTier::lend_blocks(uint64_t id, size_t layer,
                                                          size_t first_block, size_t n_blocks) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "lend_blocks");
  check_layer(id, layer, "lend_blocks");
  const size_t end = (first_block + n_blocks) * cfg_.block_tokens;
  if (n_blocks == 0 || end > s.layer_length[layer]) return std::nullopt;
  std::optional<LentBlocks> run = lent_run(s, layer, first_block, n_blocks);
  if (run) read_ += n_blocks * cfg_.block_tokens * 2 * row_bytes_;
  return run;
}

void FullTier::read_layer(uint64_t id, size_t layer, size_t n_pos, KvStaging& staging) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  staging.reserve(n_pos);
  const cpu::PagedKv v = staging.view();
  if (v.dtype != cfg_.dtype || v.block_tokens != cfg_.block_tokens || v.kv_heads != cfg_.kv_heads ||
      v.head_dim != cfg_.head_dim)
    throw Error(where(id) + ": read_layer: the staging buffer's shape differs from the tier's");
  read_layer(id, layer, n_pos, staging.k(), staging.v());
}

void FullTier::truncate(uint64_t id, size_t length) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "truncate");
  if (length >= s.held()) return;
  for (size_t& ll : s.layer_length) ll = std::min(ll, length);
  s.length = std::min(s.length, length);
  s.ahead_begin = s.ahead_end = 0;  // it lay above the length: nothing of it is kept
  on_truncate(s, s.length);
}

bool FullTier::release_if_present(uint64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (slots_.count(id) == 0) return false;
  release(id);
  return true;
}

void FullTier::release(uint64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end())
    throw Error(std::string(kind()) + " full tier: release: unknown request " + std::to_string(id));
  std::unique_ptr<Slot> s = std::move(it->second);
  slots_.erase(it);
  close_slot(id, *s);
}

size_t FullTier::length(uint64_t id) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return slot(id, "length").length;
}

size_t FullTier::layer_length(uint64_t id, size_t layer) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const Slot& s = slot(id, "layer_length");
  check_layer(id, layer, "layer_length");
  return s.layer_length[layer];
}

void FullTier::check_capacity(uint64_t id, const Slot& s, size_t new_length) const {
  if (capacity_ == 0 || new_length <= s.held()) return;
  const size_t after = bytes_held_total() + (new_length - s.held()) * bytes_per_token();
  if (after > capacity_)
    throw Error(where(id) + ": the " + std::string(kind()) + " full tier's budget of " +
                format_bytes(capacity_) + " is exhausted (" + format_bytes(bytes_held_total()) +
                " held, growing to " + std::to_string(new_length) + " positions needs " +
                format_bytes(after) + ")");
}

size_t FullTier::bytes_held_total() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, s] : slots_) n += s->held();
  return n * bytes_per_token();
}

size_t FullTier::bytes_held(uint64_t id) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return slot(id, "bytes_held").held() * bytes_per_token();
}

void FullTier::close_all() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  for (auto& [id, s] : slots_) {
    try {
      close_slot(id, *s);
    } catch (...) {  // destruction: nothing to report to
    }
  }
  slots_.clear();
}

// ---- HostFullTier ---------------------------------------------------------------

struct HostFullTier::HostSlot : Slot {
  // Shared: a pass holding lent blocks keeps their chunk after a truncate or release.
  std::vector<std::shared_ptr<std::byte>> chunks;
};

HostFullTier::HostFullTier(const KvCacheConfig& cfg, size_t chunk_blocks)
    : FullTier(cfg), chunk_blocks_(chunk_blocks) {
  if (chunk_blocks == 0) throw Error("HostFullTier: chunk_blocks must be positive");
}

HostFullTier::~HostFullTier() { close_all(); }

void HostFullTier::set_memory_placer(std::function<void(void*, size_t)> placer) {
  std::lock_guard<std::mutex> lock(placer_mu_);
  placer_ = std::move(placer);
}

std::unique_ptr<FullTier::Slot> HostFullTier::open_slot(uint64_t id, size_t capacity_blocks) {
  auto s = std::make_unique<HostSlot>();
  ensure_blocks(id, *s, capacity_blocks);
  return s;
}

void HostFullTier::ensure_blocks(uint64_t /*id*/, Slot& s, size_t n_blocks) {
  auto& h = static_cast<HostSlot&>(s);
  if (h.chunks.size() * chunk_blocks_ >= n_blocks) return;
  std::function<void(void*, size_t)> place;
  {
    std::lock_guard<std::mutex> lock(placer_mu_);
    place = placer_;
  }
  while (h.chunks.size() * chunk_blocks_ < n_blocks) {
    h.chunks.emplace_back(host_alloc(chunk_bytes(), place), host_free);
    allocated_ += chunk_bytes();
  }
}

FullTier::BlockRef HostFullTier::block_for_write(uint64_t /*id*/, Slot& s, size_t layer,
                                                 size_t block) {
  auto& h = static_cast<HostSlot&>(s);
  std::byte* k = h.chunks[block / chunk_blocks_].get() + 2 * layer * region_bytes() +
                 (block % chunk_blocks_) * block_bytes();
  return {k, k + region_bytes()};
}

void HostFullTier::read_blocks(uint64_t /*id*/, Slot& s, size_t layer, size_t first_block,
                               size_t n_blocks, std::byte* k, std::byte* v) {
  auto& h = static_cast<HostSlot&>(s);
  const size_t bb = block_bytes();
  for (size_t j = first_block, end = first_block + n_blocks; j < end;) {
    const size_t c = j / chunk_blocks_, in = j % chunk_blocks_;
    const size_t nb = std::min(chunk_blocks_ - in, end - j);  // contiguous in chunk c
    const std::byte* src = h.chunks[c].get() + 2 * layer * region_bytes() + in * bb;
    std::memcpy(k + (j - first_block) * bb, src, nb * bb);
    std::memcpy(v + (j - first_block) * bb, src + region_bytes(), nb * bb);
    j += nb;
  }
}

std::optional<FullTier::LentBlocks> HostFullTier::lent_run(Slot& s, size_t layer,
                                                           size_t first_block, size_t n_blocks) {
  auto& h = static_cast<HostSlot&>(s);
  const size_t c = first_block / chunk_blocks_, in = first_block % chunk_blocks_;
  if (in + n_blocks > chunk_blocks_ || c >= h.chunks.size()) return std::nullopt;
  const std::byte* k = h.chunks[c].get() + 2 * layer * region_bytes() + in * block_bytes();
  return LentBlocks{k, k + region_bytes(), h.chunks[c]};
}

void HostFullTier::on_truncate(Slot& s, size_t length) {
  auto& h = static_cast<HostSlot&>(s);
  const size_t keep = (blocks_for(length) + chunk_blocks_ - 1) / chunk_blocks_;
  while (h.chunks.size() > keep) {
    h.chunks.pop_back();
    allocated_ -= chunk_bytes();
  }
}

void HostFullTier::close_slot(uint64_t /*id*/, Slot& s) {
  auto& h = static_cast<HostSlot&>(s);
  allocated_ -= h.chunks.size() * chunk_bytes();
  h.chunks.clear();
}

}  // namespace vc

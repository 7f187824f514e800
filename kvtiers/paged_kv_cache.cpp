// Paged KV storage: page-aligned, lazily committed (untouched pages cost nothing).
#include "kvtiers/paged_kv_cache.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "kernels/error.hpp"

namespace vc {

namespace {
std::atomic<uint64_t> next_cache_id{1};
}  // namespace

PagedKvCache::PagedKvCache(const KvCacheConfig& cfg)
    : cfg_(cfg), pool_(cfg.num_blocks), id_(next_cache_id.fetch_add(1)),
      writes_(cfg.num_layers * cfg.num_blocks, 0) {
  if (cfg.num_layers == 0 || cfg.kv_heads == 0 || cfg.head_dim == 0 || cfg.block_tokens == 0 ||
      cfg.num_blocks == 0)
    throw Error("KvCacheConfig: every size must be positive");
  layer_bytes_ = cfg.num_blocks * cfg.kv_heads * cfg.block_tokens * cfg.head_dim *
                 dtype_size(cfg.dtype);
  storage_bytes_ = layer_bytes_ * 2 * cfg.num_layers;
  // Address space only (MAP_NORESERVE): pages are committed as blocks are written,
  // so a budget larger than what the host could commit at once is not refused here.
  void* p = mmap(nullptr, storage_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error("PagedKvCache: cannot reserve " + std::to_string(storage_bytes_) +
                " bytes of address space for " + std::to_string(cfg.num_blocks) +
                " KV blocks (the fast-memory budget's)");
  storage_ = static_cast<std::byte*>(p);
}

PagedKvCache::~PagedKvCache() { munmap(storage_, storage_bytes_); }

void PagedKvCache::reserve(KvSequence& seq, size_t positions) {
  const size_t need = (positions + cfg_.block_tokens - 1) / cfg_.block_tokens;
  while (seq.blocks.size() < need) {
    if (budget_ != nullptr) budget_->charge(block_bytes(), "a KV block");
    try {
      seq.blocks.push_back(pool_.allocate());
    } catch (...) {
      if (budget_ != nullptr) budget_->release(block_bytes());
      throw;
    }
  }
}

size_t PagedKvCache::slot_offset(const KvSequence& seq, size_t pos, size_t head) const {
  const size_t j = pos / cfg_.block_tokens;
  if (j >= seq.blocks.size())
    throw Error("PagedKvCache: position " + std::to_string(pos) + " is not reserved");
  if (seq.blocks[j] < 0)
    throw Error("PagedKvCache: position " + std::to_string(pos) + " was released");
  const size_t block = size_t(seq.blocks[j]);
  const size_t t = pos % cfg_.block_tokens;
  return (((block * cfg_.kv_heads + head) * cfg_.block_tokens + t) * cfg_.head_dim) *
         dtype_size(cfg_.dtype);
}

void PagedKvCache::write(size_t layer, KvSequence& seq, size_t pos, const float* k_row,
                         const float* v_row) {
  std::byte* k = storage_ + layer * 2 * layer_bytes_;
  std::byte* v = k + layer_bytes_;
  for (size_t h = 0; h < cfg_.kv_heads; ++h) {
    const size_t off = slot_offset(seq, pos, h);
    from_f32(cfg_.dtype, k_row + h * cfg_.head_dim, k + off, cfg_.head_dim);
    from_f32(cfg_.dtype, v_row + h * cfg_.head_dim, v + off, cfg_.head_dim);
  }
  ++writes_[layer * cfg_.num_blocks + size_t(seq.blocks[pos / cfg_.block_tokens])];
  if (seq.length < pos + 1) seq.length = pos + 1;
}

void PagedKvCache::read(size_t layer, const KvSequence& seq, size_t pos, float* k_row,
                        float* v_row) const {
  const std::byte* k = storage_ + layer * 2 * layer_bytes_;
  const std::byte* v = k + layer_bytes_;
  for (size_t h = 0; h < cfg_.kv_heads; ++h) {
    const size_t off = slot_offset(seq, pos, h);
    to_f32(cfg_.dtype, k + off, k_row + h * cfg_.head_dim, cfg_.head_dim);
    to_f32(cfg_.dtype, v + off, v_row + h * cfg_.head_dim, cfg_.head_dim);
  }
}

void PagedKvCache::truncate(KvSequence& seq, size_t length) {
  if (length >= seq.length) return;
  const size_t keep = (length + cfg_.block_tokens - 1) / cfg_.block_tokens;
  while (seq.blocks.size() > keep) {
    if (seq.blocks.back() >= 0) release_block(seq.blocks.back());
    seq.blocks.pop_back();
  }
  seq.length = length;
}

void PagedKvCache::release_prefix(KvSequence& seq, size_t upto) {
  const size_t whole = std::min(upto / cfg_.block_tokens, seq.blocks.size());
  for (size_t j = 0; j < whole; ++j)
    if (seq.blocks[j] >= 0) {
      release_block(seq.blocks[j]);
      seq.blocks[j] = -1;
    }
}

void PagedKvCache::start_at(KvSequence& seq, size_t n) {
  if (seq.length != 0 || !seq.blocks.empty())
    throw Error("PagedKvCache::start_at: the sequence is not empty");
  seq.blocks.assign(n / cfg_.block_tokens, -1);
  seq.length = n;
}

void PagedKvCache::free(KvSequence& seq) {
  for (int32_t b : seq.blocks)
    if (b >= 0) release_block(b);
  seq.blocks.clear();
  seq.length = 0;
}

void PagedKvCache::release_block(int32_t block) {
  pool_.release(block);
  if (pool_.refcount(block) > 0) return;
  if (budget_ != nullptr) budget_->release(block_bytes());
  auto it = published_.find(block);
  if (it == published_.end()) return;
  auto range = prefix_index_.equal_range(it->second.key);
  for (auto e = range.first; e != range.second; ++e)
    if (e->second == block) {
      prefix_index_.erase(e);
      break;
    }
  published_.erase(it);
}

uint64_t PagedKvCache::prefix_key(int32_t parent, std::span<const int32_t> tokens) {
  auto mix = [](uint64_t x) {  // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(uint64_t(int64_t(parent)) + 1);
  for (int32_t t : tokens) h = mix(h ^ uint64_t(uint32_t(t)));
  return h;
}

size_t PagedKvCache::share_prefix(KvSequence& seq, std::span<const int32_t> tokens,
                                  size_t limit) {
  if (!cfg_.prefix_sharing || seq.length != 0 || !seq.blocks.empty()) return 0;
  const size_t bt = cfg_.block_tokens;
  const size_t max_blocks = std::min(tokens.size(), limit) / bt;
  int32_t parent = -1;
  for (size_t j = 0; j < max_blocks; ++j) {
    const auto blk = tokens.subspan(j * bt, bt);
    int32_t found = -1;
    auto range = prefix_index_.equal_range(prefix_key(parent, blk));
    for (auto e = range.first; e != range.second && found < 0; ++e) {
      const Published& p = published_.at(e->second);
      if (p.parent == parent && std::equal(p.tokens.begin(), p.tokens.end(), blk.begin()))
        found = e->second;
    }
    if (found < 0) break;
    pool_.retain(found);
    seq.blocks.push_back(found);
    parent = found;
  }
  seq.length = seq.blocks.size() * bt;
  return seq.length;
}

void PagedKvCache::publish_prefix(const KvSequence& seq, std::span<const int32_t> tokens) {
  if (!cfg_.prefix_sharing) return;
  const size_t bt = cfg_.block_tokens;
  const size_t full = std::min(tokens.size(), seq.length) / bt;
  int32_t parent = -1;
  for (size_t j = 0; j < full && j < seq.blocks.size(); ++j) {
    const int32_t b = seq.blocks[j];
    if (b < 0) return;
    if (!published_.count(b)) {
      const auto blk = tokens.subspan(j * bt, bt);
      Published p{parent, std::vector<int32_t>(blk.begin(), blk.end()), prefix_key(parent, blk)};
      prefix_index_.emplace(p.key, b);
      published_.emplace(b, std::move(p));
    }
    parent = b;
  }
}

cpu::PagedKv PagedKvCache::view(size_t layer, const KvSequence& seq) const {
  const std::byte* k = storage_ + layer * 2 * layer_bytes_;
  return cpu::PagedKv{k,          k + layer_bytes_,  cfg_.dtype,         cfg_.block_tokens,
                      cfg_.kv_heads, cfg_.head_dim, seq.blocks.data()};
}

size_t PagedKvCache::bytes_per_token() const {
  return 2 * cfg_.num_layers * cfg_.kv_heads * cfg_.head_dim * dtype_size(cfg_.dtype);
}

}  // namespace vc

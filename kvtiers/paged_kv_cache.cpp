// Paged KV storage: page-aligned, lazily committed (untouched pages cost nothing).
#include "kvtiers/paged_kv_cache.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/error.hpp"

namespace vc {

PagedKvCache::PagedKvCache(const KvCacheConfig& cfg) : cfg_(cfg), pool_(cfg.num_blocks) {
  if (cfg.num_layers == 0 || cfg.kv_heads == 0 || cfg.head_dim == 0 || cfg.block_tokens == 0 ||
      cfg.num_blocks == 0)
    throw Error("KvCacheConfig: every size must be positive");
  layer_bytes_ = cfg.num_blocks * cfg.kv_heads * cfg.block_tokens * cfg.head_dim *
                 dtype_size(cfg.dtype);
  storage_bytes_ = layer_bytes_ * 2 * cfg.num_layers;
  void* p = mmap(nullptr, storage_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED)
    throw Error("PagedKvCache: cannot reserve " + std::to_string(storage_bytes_) +
                " bytes of KV storage");
  storage_ = static_cast<std::byte*>(p);
}

PagedKvCache::~PagedKvCache() { munmap(storage_, storage_bytes_); }

void PagedKvCache::reserve(KvSequence& seq, size_t positions) {
  const size_t need = (positions + cfg_.block_tokens - 1) / cfg_.block_tokens;
  while (seq.blocks.size() < need) seq.blocks.push_back(pool_.allocate());
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
    if (seq.blocks.back() >= 0) pool_.release(seq.blocks.back());
    seq.blocks.pop_back();
  }
  seq.length = length;
}

void PagedKvCache::release_prefix(KvSequence& seq, size_t upto) {
  const size_t whole = std::min(upto / cfg_.block_tokens, seq.blocks.size());
  for (size_t j = 0; j < whole; ++j)
    if (seq.blocks[j] >= 0) {
      pool_.release(seq.blocks[j]);
      seq.blocks[j] = -1;
    }
}

void PagedKvCache::free(KvSequence& seq) {
  for (int32_t b : seq.blocks)
    if (b >= 0) pool_.release(b);
  seq.blocks.clear();
  seq.length = 0;
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

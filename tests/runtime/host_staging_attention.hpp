// A host double of the AttentionBackend (runtime/attention_backend.hpp) for tests
// where no GPU is: it keeps its own copies as a device does (the cache's, refreshed
// through KvMirror; verify chunks and views' kept rows copied per pass) and attends
// over them with the CPU's attention_row / attention_row_mixed, so its bits are the
// CPU's. Counts what it was handed. Used by attention_backend_test.cpp and
// device_rows_test.cpp.
#pragma once
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/attention_mixed.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/kv_mirror.hpp"
#include "kvtiers/packed_kv.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/staging_ring.hpp"

namespace vc::test {

class HostStagingAttention final : public AttentionBackend {
 public:
  std::atomic<size_t> passes{0}, chunked_passes{0}, rows{0}, cached_rows{0}, view_rows{0},
      packed_prefixes{0}, view_passes{0}, view_layer_copies{0}, blocks_read{0}, blocks_copied{0}, tail_blocks_copied{0},
      deferred_adds{0}, chunked_ring_passes{0}, rows_written_through{0};

  // Rows over a cache read this backend's copy of it, refreshed through KvMirror
  // as the CUDA backend refreshes its device copy: a block the mirror fails to name
  // would be read stale here, and the output would differ from the CPU model's.
  void attend_cached(const PagedKvCache& cache, size_t layer, size_t n_heads,
                     std::span<const KvSequence* const> seqs, std::span<const int32_t> n_ctx,
                     float scale, const float* q, float* out) override {
    std::lock_guard lock(mu_);
    const size_t bt = cache.config().block_tokens;
    std::vector<int32_t> needed;
    for (size_t m = 0; m < seqs.size(); ++m)
      for (size_t j = 0; j < (size_t(n_ctx[m]) + bt - 1) / bt; ++j) needed.push_back(seqs[m]->blocks[j]);
    blocks_read += needed.size();
    const cpu::PagedKv copy = refreshed(cache, layer, needed, blocks_copied);
    const size_t d = n_heads * cache.config().head_dim;
    for (size_t m = 0; m < seqs.size(); ++m) {
      cpu::PagedKv kv = copy;
      kv.block_table = seqs[m]->blocks.data();
      cpu::attention_row(q + m * d, n_heads, kv, size_t(n_ctx[m]), scale, out + m * d);
    }
    cached_rows += seqs.size();
  }

  // The rows' K and V stored into this backend's copy of the cache as the cache
  // stores them (from_f32), the mirror told (KvMirror::wrote_through), as the CUDA
  // backend's kernel does: a row stored in the wrong place or with other rounding,
  // or a block marked current that is not, would be read wrong here.
  void wrote(const PagedKvCache& cache, size_t layer, std::span<const KvSequence* const> seqs,
             std::span<const int32_t> positions, const float* k, const float* v) override {
    std::lock_guard lock(mu_);
    const auto it = copies_.find(cache.id());
    if (it == copies_.end()) return;
    const KvCacheConfig& cfg = cache.config();
    const size_t row = cfg.kv_heads * cfg.head_dim, es = dtype_size(cfg.dtype);
    std::vector<int32_t> written(seqs.size());
    for (size_t m = 0; m < seqs.size(); ++m) {
      const size_t pos = size_t(positions[m]);
      const int32_t b = seqs[m]->blocks.at(pos / cfg.block_tokens);
      written[m] = b;
      for (size_t h = 0; h < cfg.kv_heads; ++h) {
        const size_t off = ((size_t(b) * cfg.kv_heads + h) * cfg.block_tokens + pos % cfg.block_tokens) *
                           cfg.head_dim * es;
        from_f32(cfg.dtype, k + m * row + h * cfg.head_dim, it->second.k[layer].data() + off, cfg.head_dim);
        from_f32(cfg.dtype, v + m * row + h * cfg.head_dim, it->second.v[layer].data() + off, cfg.head_dim);
      }
    }
    it->second.mirror.wrote_through(layer, written);
    rows_written_through += seqs.size();
  }

  // Draft rows: the kept rows copied out as a device would take them, the tails
  // read through the same copy of the cache, attention_row_mixed as the CPU runs it.
  void attend_views(const PagedKvCache& cache, size_t layer, size_t n_heads, const ViewRowsPlan& plan,
                    std::span<const int32_t> n_ctx, float scale, const float* q, float* out) override {
    std::lock_guard lock(mu_);
    const KvCacheConfig& cfg = cache.config();
    const size_t nkv = cfg.kv_heads, row_bytes = cfg.head_dim * dtype_size(cfg.dtype);
    const cpu::PagedKv copy = refreshed(cache, layer, plan.tail_blocks, tail_blocks_copied);
    const size_t hd = cfg.head_dim;
    // Each (view, head)'s kept rows from this backend's copy of the view's layer,
    // made on first use and kept while the view lives unchanged, as the CUDA
    // backend keeps its device copies: a view changed under the same id would be
    // read stale here.
    for (auto it = view_copies_.begin(); it != view_copies_.end();)
      it = it->second.alive.expired() ? view_copies_.erase(it) : std::next(it);
    std::vector<const std::vector<std::byte>*> kept_k, kept_v;
    for (const ViewRowsPlan::Prefix& p : plan.prefixes) {
      ViewCopy& vc = view_copies_[{p.view->id(), plan.layer}];
      if (vc.k.empty()) {
        vc.alive = p.view->lifetime();
        vc.k.resize(p.view->kv_heads()), vc.v.resize(p.view->kv_heads());
        ++view_layer_copies;
      }
      std::vector<std::byte>& k = vc.k.at(p.head);
      std::vector<std::byte>& v = vc.v.at(p.head);
      if (k.empty() && p.rows > 0) {
        if (p.packed()) {  // dequantized and transformed as the compressed tier decodes it
          ++packed_prefixes;
          k.resize(p.rows * hd * sizeof(float)), v.resize(k.size());
          for (const int32_t pos : std::span(p.positions, p.rows))
            if (pos > plan.max_rope_position && (p.k_side->transform == PackedTransform::rope ||
                                                 p.v_side->transform == PackedTransform::rope))
              throw Error("a RoPE side reads past the plan's largest position");
          p.k_side->decode(reinterpret_cast<float*>(k.data()), p.rows, hd, p.positions, plan.rope_inv_freq);
          p.v_side->decode(reinterpret_cast<float*>(v.data()), p.rows, hd, p.positions, plan.rope_inv_freq);
        } else {
          const auto* hk = static_cast<const std::byte*>(p.k);
          const auto* hv = static_cast<const std::byte*>(p.v);
          k.assign(hk, hk + p.rows * row_bytes), v.assign(hv, hv + p.rows * row_bytes);
        }
      }
      kept_k.push_back(&k), kept_v.push_back(&v);
    }
    const size_t d = n_heads * hd;
    std::vector<cpu::DenseKvHead> prefix(nkv);
    for (size_t m = 0; m < n_ctx.size(); ++m) {
      for (size_t g = 0; g < nkv; ++g) {
        const size_t p = size_t(plan.prefix_of[m * nkv + g]);
        const ViewRowsPlan::Prefix& pre = plan.prefixes[p];
        prefix[g] = {kept_k[p]->data(), kept_v[p]->data(), pre.rows, pre.packed() ? DType::f32 : cfg.dtype};
      }
      cpu::PagedKv tail = copy;
      tail.block_table = plan.tables.data() + m * plan.table_stride;
      cpu::attention_row_mixed(q + m * d, n_heads, prefix.data(), tail, size_t(plan.tail_begin[m]),
                               size_t(n_ctx[m]), scale, out + m * d);
    }
    view_rows += n_ctx.size();
    ++view_passes;
  }

  class HostPass final : public Pass {
   public:
    HostPass(HostStagingAttention& o, size_t n_heads, const cpu::PagedKv& shape,
             std::span<const int32_t> n_ctx, size_t max_blocks, float scale)
        : owner_(o), n_heads_(n_heads), shape_(shape), n_ctx_(n_ctx.begin(), n_ctx.end()),
          max_blocks_(max_blocks), scale_(scale),
          block_bytes_(shape.kv_heads * shape.block_tokens * shape.head_dim * dtype_size(shape.dtype)) {
      for (const int32_t n : n_ctx_) stride_ = std::max(stride_, (size_t(n) + shape.block_tokens - 1) / shape.block_tokens);
      tables_.assign(n_ctx_.size() * std::max<size_t>(stride_, 1), -1);
    }
    // Given the queries first, the pass follows the CUDA pass's ring rules
    // (StagingRing, each chunk taken as soon as it is complete; here a ring of 2
    // chunks of 64 positions, smaller than the CUDA pass's, so that short test
    // prompts wrap it): every add for all rows, blocks in position order.
    void queries(const float* q) override {
      (void)q;
      if (adds_ > 0) throw Error("queries after blocks");
      const size_t bt = shape_.block_tokens, cb = std::max<size_t>(1, 64 / bt);
      ring_.emplace(stride_, cb, 2);
    }
    // Block tables are read at once (the caller's, reused after release), the
    // bytes of lent blocks (keep set) only in run(), as a device's copies land
    // after add returns: lent memory freed or rewritten meanwhile would show.
    void add(size_t r0, size_t r1, const cpu::PagedKv& kv, size_t b_begin, size_t b_end,
             std::shared_ptr<const void> keep) override {
      ++adds_;
      if (ring_) {
        if (r0 != 0 || r1 != n_ctx_.size()) throw Error("a chunked pass takes blocks for all its rows at once");
        size_t ready = ring_->launched();
        for (size_t j = b_begin; j < std::min(b_end, stride_); ++j) {
          const size_t chunk = j / ring_->chunk_blocks();
          if (chunk >= 2 && chunk - 2 >= ring_->launched() && ready > ring_->launched())
            ring_->launched_upto(ready);
          ready = ring_->stage(j);  // throws where the CUDA pass would overwrite a chunk not read
        }
        ring_->launched_upto(ready);
      }
      if (keep != nullptr) ++owner_.deferred_adds;
      b_end = std::min(b_end, stride_);
      for (size_t j = b_begin; j < b_end; ++j) {
        if (used_ == max_blocks_) throw Error("more blocks than the pass was sized for");
        const int32_t p = kv.block_table[j];
        if (p < 0) throw Error("a released block");
        const auto* hk = static_cast<const std::byte*>(kv.k) + size_t(p) * block_bytes_;
        const auto* hv = static_cast<const std::byte*>(kv.v) + size_t(p) * block_bytes_;
        k_.resize(k_.size() + block_bytes_), v_.resize(v_.size() + block_bytes_);
        if (keep != nullptr) {
          deferred_.push_back({used_, hk, hv});
        } else {
          std::memcpy(k_.data() + used_ * block_bytes_, hk, block_bytes_);
          std::memcpy(v_.data() + used_ * block_bytes_, hv, block_bytes_);
        }
        for (size_t r = r0; r < r1; ++r) tables_[r * stride_ + j] = int32_t(used_);
        ++used_;
      }
      if (keep != nullptr) keeps_.push_back(std::move(keep));
    }
    void run(const float* q, float* out) override {
      if (ring_ && ring_->launched() < ring_->chunks()) throw Error("a chunk of the pass was never complete");
      if (ring_ && ring_->chunks() > 2) ++owner_.chunked_ring_passes;
      for (const Deferred& d : deferred_) {
        std::memcpy(k_.data() + d.slot * block_bytes_, d.k, block_bytes_);
        std::memcpy(v_.data() + d.slot * block_bytes_, d.v, block_bytes_);
      }
      deferred_.clear();
      keeps_.clear();
      ++owner_.passes;
      if (adds_ > 1) ++owner_.chunked_passes;
      owner_.rows += n_ctx_.size();
      const size_t d = n_heads_ * shape_.head_dim;
      for (size_t m = 0; m < n_ctx_.size(); ++m) {
        cpu::PagedKv kv = shape_;
        kv.k = k_.data(), kv.v = v_.data(), kv.block_table = tables_.data() + m * stride_;
        for (size_t b = 0; b < (size_t(n_ctx_[m]) + shape_.block_tokens - 1) / shape_.block_tokens; ++b)
          if (kv.block_table[b] < 0) throw Error("a block that was not staged");
        cpu::attention_row(q + m * d, n_heads_, kv, size_t(n_ctx_[m]), scale_, out + m * d);
      }
    }

   private:
    HostStagingAttention& owner_;
    size_t n_heads_;
    cpu::PagedKv shape_;
    std::vector<int32_t> n_ctx_;
    size_t max_blocks_;
    float scale_;
    size_t block_bytes_, stride_ = 0, used_ = 0, adds_ = 0;
    std::vector<std::byte> k_, v_;
    std::vector<int32_t> tables_;
    struct Deferred {
      size_t slot;
      const std::byte *k, *v;
    };
    std::vector<Deferred> deferred_;
    std::vector<std::shared_ptr<const void>> keeps_;
    std::optional<StagingRing> ring_;
  };

  // Its copies, as a device's memory: what Model::device_bytes() reports.
  size_t device_bytes() const override {
    std::lock_guard lock(mu_);
    size_t bytes = 0;
    for (const auto& [id, c] : copies_)
      for (size_t l = 0; l < c.k.size(); ++l) bytes += c.k[l].size() + c.v[l].size();
    for (const auto& [key, vc] : view_copies_)
      for (size_t g = 0; g < vc.k.size(); ++g) bytes += vc.k[g].size() + vc.v[g].size();
    return bytes;
  }

  std::unique_ptr<Pass> begin(size_t n_heads, const cpu::PagedKv& shape,
                              std::span<const int32_t> n_ctx, size_t max_blocks,
                              float scale) override {
    return std::make_unique<HostPass>(*this, n_heads, shape, n_ctx, max_blocks, scale);
  }

 private:
  struct Copy {
    explicit Copy(const PagedKvCache& cache) : mirror(cache) {
      const KvCacheConfig& c = cache.config();
      const size_t bytes = c.num_blocks * c.kv_heads * c.block_tokens * c.head_dim * dtype_size(c.dtype);
      k.assign(c.num_layers, std::vector<std::byte>(bytes));
      v.assign(c.num_layers, std::vector<std::byte>(bytes));
    }
    KvMirror mirror;
    std::vector<std::vector<std::byte>> k, v;  // per layer, the cache's layout
  };
  // Layer `layer` of this backend's copy of `cache` (block_table unset) with the
  // blocks in `needed` current, through KvMirror as the CUDA backend refreshes its
  // device copy: a block the mirror failed to name would be read stale.
  // Counts the blocks it copies in `copied`.
  cpu::PagedKv refreshed(const PagedKvCache& cache, size_t layer, std::span<const int32_t> needed,
                         std::atomic<size_t>& copied) {
    for (auto it = copies_.begin(); it != copies_.end();)
      it = it->second.mirror.expired() ? copies_.erase(it) : std::next(it);
    const KvCacheConfig& cfg = cache.config();
    const size_t bb = cfg.kv_heads * cfg.block_tokens * cfg.head_dim * dtype_size(cfg.dtype);
    auto it = copies_.find(cache.id());
    if (it == copies_.end()) it = copies_.emplace(cache.id(), Copy(cache)).first;
    Copy& copy = it->second;
    KvSequence none;
    const cpu::PagedKv host = cache.view(layer, none);
    std::vector<std::byte>& k = copy.k[layer];
    std::vector<std::byte>& v = copy.v[layer];
    for (const auto& [first, count] : copy.mirror.stale(layer, needed)) {
      const size_t off = size_t(first) * bb, bytes = size_t(count) * bb;
      std::memcpy(k.data() + off, static_cast<const std::byte*>(host.k) + off, bytes);
      std::memcpy(v.data() + off, static_cast<const std::byte*>(host.v) + off, bytes);
      copied += size_t(count);
    }
    cpu::PagedKv out = host;
    out.k = k.data(), out.v = v.data(), out.block_table = nullptr;
    return out;
  }

  struct ViewCopy {
    std::weak_ptr<const void> alive;
    std::vector<std::vector<std::byte>> k, v;  // per KV head, as the pass reads them
  };

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Copy> copies_;
  std::map<std::pair<uint64_t, size_t>, ViewCopy> view_copies_;  // (view id, layer)
};

}  // namespace vc::test

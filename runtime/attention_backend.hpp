// Where a forward pass runs the attention of its full-KV rows when not on the CPU:
// a model placed on a device (Model::on_device) carries one, and forward() hands it
// every row that attends over the full KV (prefill chunks, decode steps, verify
// passes, over the paged cache or over chunks streamed in from a full tier), and
// the draft rows over compressed views (attend_views: kept rows plain or packed;
// only an undescribed codec's fp32 views stay on the CPU): their tokens are
// proposals, checked by a verify pass, so where they run cannot change the output.
//
// The KV stays where the tiers keep it (host memory). Rows over the paged cache
// attend over the backend's copy of the cache (attend_cached), which refreshes only
// the blocks written since it last copied them (kvtiers/kv_mirror.hpp); rows over a
// full tier's streamed chunks attend over a pass that stages each chunk as it comes
// (begin / Pass). Every full-KV row of a model on a device goes through the same
// kernel with the same split by absolute position, whether its KV came from the
// cache or a full tier, so full decoding and verification see the same bits (the
// exactness contract), as on the CPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/cpu/attention.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/view_rows_plan.hpp"

namespace vc {

class AttentionBackend {
 public:
  /// One layer's attention of the rows of one pass, built up block by block.
  class Pass {
   public:
    virtual ~Pass() = default;
    /// Rows [r0, r1) of the pass read logical blocks [b_begin, b_end) of `kv`
    /// (through kv.block_table). Without `keep` the blocks are on the device when
    /// this returns: the caller may release or overwrite `kv`'s memory. With it,
    /// the memory stays valid and unchanged while `keep` is held (blocks a full
    /// tier lends in place, KvChunk::keep), so the pass may hold `keep` and let the
    /// copies run on while the caller goes on to the next chunk.
    virtual void add(size_t r0, size_t r1, const cpu::PagedKv& kv, size_t b_begin, size_t b_end,
                     std::shared_ptr<const void> keep) = 0;
    /// The rows' queries, before any block is added (forward() gives them): the pass
    /// may then attend to its blocks as they come, chunk by chunk, holding only the
    /// chunks in flight, provided every add is for all its rows and blocks come in
    /// position order; run() must get the same queries. Optional (the default
    /// ignores them; the CUDA pass uses them).
    virtual void queries(const float* q) { (void)q; }
    /// out[m, h, :] = softmax(scale * q[m, h] · K[0, n_ctx[m])) · V[0, n_ctx[m]) for
    /// every row m of the pass ([M, n_heads, head_dim] f32; host pointers, or for
    /// a model whose rows stay on the device, DeviceRows::at's addresses). Throws
    /// vc::Error when a row's blocks were not all added, or for a device failure.
    virtual void run(const float* q, float* out) = 0;
  };
  virtual ~AttentionBackend() = default;
  /// One layer's attention of rows over `cache`: row m reads positions
  /// [0, n_ctx[m]) through seqs[m]'s block table; q, out: [M, n_heads, head_dim]
  /// f32, host pointers or DeviceRows::at's addresses (as for Pass::run). The backend may keep the cache's blocks between calls (a copy
  /// dropped once the cache is gone), refreshing those written since. Batch
  /// invariant as a Pass; the bits of a Pass over the same KV. Safe from several
  /// threads at once for different caches.
  virtual void attend_cached(const PagedKvCache& cache, size_t layer, size_t n_heads,
                             std::span<const KvSequence* const> seqs,
                             std::span<const int32_t> n_ctx, float scale, const float* q,
                             float* out) = 0;
  /// The rows of a pass over `cache` have just written layer `layer` (PagedKvCache::
  /// write): row m's K and V, k and v [M, kv_heads * head_dim] f32 (host pointers or
  /// DeviceRows::at's addresses), at position positions[m] of seqs[m]. A backend
  /// holding a copy of the cache may store them into it itself, so that the blocks
  /// they went to need no copy from the host before the next read (KvMirror::
  /// wrote_through). Optional: the default leaves the blocks to be refreshed.
  virtual void wrote(const PagedKvCache& cache, size_t layer, std::span<const KvSequence* const> seqs,
                     std::span<const int32_t> positions, const float* k, const float* v) {
    (void)cache, (void)layer, (void)seqs, (void)positions, (void)k, (void)v;
  }
  /// One layer's attention of draft rows laid out by plan_view_rows: row m over
  /// its views' kept rows, then positions [plan.tail_begin[m], n_ctx[m]) of its
  /// sequence in `cache` (its tail). Drafts are proposals, so this need not give the
  /// CPU's bits. The backend may keep a view's kept rows between calls, named by
  /// CompressedView::id() and dropped once its lifetime() expires.
  virtual void attend_views(const PagedKvCache& cache, size_t layer, size_t n_heads,
                            const ViewRowsPlan& plan, std::span<const int32_t> n_ctx, float scale,
                            const float* q, float* out) = 0;
  /// A pass of n_ctx.size() rows over KV shaped like `shape` (its data is not
  /// read), `n_heads` query heads; at most `max_blocks` blocks will be added in all.
  /// Batch invariant: a row's output depends on its query and its first n_ctx
  /// positions only, bit for bit. Safe to use from several threads at once (a pass
  /// per thread).
  [[nodiscard]] virtual std::unique_ptr<Pass> begin(size_t n_heads, const cpu::PagedKv& shape,
                                                    std::span<const int32_t> n_ctx,
                                                    size_t max_blocks, float scale) = 0;
  /// What decides the bits of its full-KV rows, in words (Model::numerics()).
  [[nodiscard]] virtual std::string numerics() const { return "device attention"; }
  /// Bytes of device memory held now: the caches' and views' copies, the passes'
  /// buffers (copies of caches and views that are gone count until the next call
  /// drops them).
  [[nodiscard]] virtual size_t device_bytes() const { return 0; }
};

/// Attention on CUDA device `index`. Throws vc::Error naming the device when this
/// build has no CUDA or the device cannot be used.
[[nodiscard]] std::shared_ptr<AttentionBackend> make_cuda_attention(int index);

}  // namespace vc

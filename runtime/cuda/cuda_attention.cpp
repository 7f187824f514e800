// The CUDA AttentionBackend. Rows over the paged cache attend over a copy of the
// cache in device memory, one per cache, kept current block by block (cache_copies.hpp).
// Rows over a full tier's streamed chunks attend over a pass (cuda_pass.hpp) that
// copies the blocks its rows read to the device, in a ring it attends over chunk by
// chunk as they arrive when it has the queries first (forward's passes), else into
// a pool of its own for one launch at the end. Both launch
// the batch-invariant paged attention kernel (kernels/cuda/attention.cuh) on a
// stream of the calling thread's own context; queries go up and outputs come back
// with every launch. Draft rows over compressed views (attend_views) read their
// tails from the cache's copy and their kept rows from the view's own copy on the
// device, one per (view, layer), made on its first pass and dropped once the view
// is gone or changed (CompressedView::id / lifetime): plain rows as they are, packed
// ones (KIVI, KVQuant, RotateKV) as codes, scales, zeros, bf16 rows and outliers
// that the drafter's kernel dequantizes (with the RoPE table or the Hadamard
// transform their decode applies; kernels/cuda/attention_mixed.cuh).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cpu/row_transforms.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_mixed.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/host_pinning.hpp"
#include "kvtiers/kv_mirror.hpp"
#include "kvtiers/packed_kv.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/cuda/cache_copies.hpp"
#include "runtime/cuda/cuda_host_pinner.hpp"
#include "runtime/cuda/cuda_pass.hpp"
#include "runtime/cuda/device_buffer.hpp"
#include "runtime/cuda/packed_side_staging.hpp"
#include "runtime/cuda/view_copies.hpp"
#include "runtime/view_rows_plan.hpp"

namespace vc {
namespace {

using cuda_backend::CacheCopies;
using cuda_backend::CacheCopy;
using cuda_backend::cuda_error;
using cuda_backend::DeviceBuffer;
using cuda_backend::CudaHostPinner;
using cuda_backend::describe;
using cuda_backend::launch_rows;
using cuda_backend::PassContext;
using cuda_backend::PassOwner;
using cuda_backend::put;
using cuda_backend::require_device;
using cuda_backend::stage_side;
using cuda_backend::StagedSide;
using cuda_backend::ViewCopies;
using cuda_backend::ViewLayerCopy;

class CudaAttention final : public AttentionBackend, public PassOwner {
 public:
  explicit CudaAttention(int index) : index_(index) {
    require_device(index);
    name_ = "cuda:" + std::to_string(index);
  }

  // The kernels split and reduce by absolute position the same way on every GPU.
  [[nodiscard]] std::string numerics() const override { return "cuda attention kernels"; }

  std::unique_ptr<Pass> begin(size_t n_heads, const cpu::PagedKv& shape,
                              std::span<const int32_t> n_ctx, size_t max_blocks,
                              float scale) override {
    return cuda_backend::make_pass(*this, take_context(), n_heads, shape, n_ctx, max_blocks, scale);
  }

  void attend_cached(const PagedKvCache& cache, size_t layer, size_t n_heads,
                     std::span<const KvSequence* const> seqs, std::span<const int32_t> n_ctx,
                     float scale, const float* q, float* out) override {
    const size_t M = seqs.size();
    if (n_ctx.size() != M)
      throw Error("device " + name_ + ": " + std::to_string(M) + " sequences for " +
                  std::to_string(n_ctx.size()) + " context lengths");
    if (M == 0) return;
    const KvCacheConfig& cfg = cache.config();
    const size_t bt = cfg.block_tokens;
    // The rows' block tables, and the blocks they read.
    size_t stride = 1;
    for (size_t m = 0; m < M; ++m) stride = std::max(stride, (size_t(n_ctx[m]) + bt - 1) / bt);
    std::vector<int32_t> tables(M * stride, 0), needed;
    for (size_t m = 0; m < M; ++m) {
      const size_t need = (size_t(n_ctx[m]) + bt - 1) / bt;
      if (n_ctx[m] < 0 || need > seqs[m]->blocks.size())
        throw Error("device " + name_ + ": row " + std::to_string(m) + " reads " +
                    std::to_string(n_ctx[m]) + " positions its sequence does not hold");
      for (size_t j = 0; j < need; ++j) {
        const int32_t b = seqs[m]->blocks[j];
        if (b < 0)
          throw Error("device " + name_ + ": row " + std::to_string(m) + " reads KV block " +
                      std::to_string(j) + ", which has been released");
        tables[m * stride + j] = b;
        needed.push_back(b);
      }
    }
    with_cache_copy(cache, layer, needed, [&](PassContext& ctx, const void* dk, const void* dv) {
      launch_rows(ctx, name_, dk, dv, cache.view(layer, *seqs[0]), tables, stride, n_ctx, n_heads,
                  scale, q, out);
    });
  }

  // The rows' K and V stored into the cache's copy by a kernel (kv_store.cuh, the
  // host write's rounding), so the blocks they went to stay current: a decode step
  // then copies nothing from the host. Blocks past the copy's room stay stale.
  void wrote(const PagedKvCache& cache, size_t layer, std::span<const KvSequence* const> seqs,
             std::span<const int32_t> positions, const float* k, const float* v) override {
    const size_t M = seqs.size();
    if (M == 0 || positions.size() != M) return;
    const KvCacheConfig& cfg = cache.config();
    const std::shared_ptr<CacheCopy> mirror = cache_copies_.of(cache);
    std::lock_guard hold(mirror->mu);
    if (mirror->held == 0) return;  // nothing copied yet: the first read copies the blocks
    std::unique_ptr<PassContext> ctx = take_context();
    std::vector<int32_t>& at = ctx->places;  // [blocks][offsets]
    at.resize(2 * M);
    bool any = false;
    for (size_t m = 0; m < M; ++m) {
      const size_t pos = size_t(positions[m]), j = pos / cfg.block_tokens;
      const int32_t b = j < seqs[m]->blocks.size() ? seqs[m]->blocks[j] : -1;
      at[m] = b >= 0 && size_t(b) < mirror->held ? b : -1;
      at[M + m] = int32_t(pos % cfg.block_tokens);
      any = any || at[m] >= 0;
    }
    if (!any) return give_back(std::move(ctx));
    try {
      auto check = [&](cudaError_t e, const char* what) {
        if (e != cudaSuccess) throw Error("device " + name_ + ": " + what + ": " + cuda_error(e));
      };
      check(cudaSetDevice(index_), "cudaSetDevice");
      if (ctx->stream == nullptr)
        check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate");
      const size_t rb = M * cfg.kv_heads * cfg.head_dim * sizeof(float);
      check(ctx->q.reserve(rb), "allocating K rows");
      check(ctx->out.reserve(rb), "allocating V rows");
      check(ctx->tables.reserve(at.size() * sizeof(int32_t)), "allocating row places");
      cudaStream_t s = ctx->stream;
      check(cudaMemcpyAsync(ctx->q.get(), k, rb, cudaMemcpyDefault, s), "copying K rows");  // host or device
      check(cudaMemcpyAsync(ctx->out.get(), v, rb, cudaMemcpyDefault, s), "copying V rows");
      check(cudaMemcpyAsync(ctx->tables.get(), at.data(), at.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s),
            "copying row places");
      auto* dk = static_cast<std::byte*>(mirror->storage.get()) + layer * 2 * mirror->layer_bytes;
      const auto* places = static_cast<const int32_t*>(ctx->tables.get());
      check(cuda::launch_kv_store(static_cast<const float*>(ctx->q.get()), static_cast<const float*>(ctx->out.get()),
                                  M, places, places + M, cfg.kv_heads, cfg.block_tokens, cfg.head_dim, cfg.dtype,
                                  dk, dk + mirror->layer_bytes, s),
            "storing K and V rows in the cache's copy");
      check(cudaStreamSynchronize(s), "the attention's stream");
      mirror->blocks->wrote_through(layer, std::span(at.data(), M));
    } catch (...) {
      drop_copy(cache, *mirror, std::move(ctx));
      throw;
    }
    give_back(std::move(ctx));
  }

  void attend_views(const PagedKvCache& cache, size_t layer, size_t n_heads,
                    const ViewRowsPlan& plan_ref, std::span<const int32_t> n_ctx, float scale,
                    const float* q, float* out) override {
    const size_t M = n_ctx.size();
    if (M == 0) return;
    const ViewRowsPlan* plan = &plan_ref;
    if (plan->tail_begin.size() != M)
      throw Error("device " + name_ + ": a plan of " + std::to_string(plan->tail_begin.size()) +
                  " draft rows for " + std::to_string(M) + " context lengths");
    const KvCacheConfig& cfg = cache.config();
    const size_t nkv = cfg.kv_heads, hd = cfg.head_dim, row_bytes = hd * dtype_size(cfg.dtype);
    with_cache_copy(cache, layer, plan->tail_blocks, [&](PassContext& ctx, const void* dk, const void* dv) {
      auto check = [&](cudaError_t e, const char* what) {
        if (e != cudaSuccess) throw Error("device " + name_ + ": " + what + ": " + cuda_error(e));
      };
      cudaStream_t s = ctx.stream;
      // The kept rows of each distinct (view, head): the view's copy of this layer
      // on the device, made on its first pass (kept until the view is gone or changed).
      std::vector<const void*> at_k(plan->prefixes.size(), nullptr), at_v(plan->prefixes.size(), nullptr);
      std::vector<cuda::QuantPrefixSide> packed_k(plan->prefixes.size()), packed_v(plan->prefixes.size());
      bool any_packed = false;
      const float* rope = plan->max_rope_position >= 0
                              ? rope_table(ctx, plan->rope_inv_freq, hd, plan->max_rope_position)
                              : nullptr;
      std::vector<std::shared_ptr<ViewLayerCopy>> held;  // alive until the pass is done
      const CompressedView* held_view = nullptr;  // held.back()'s (a view's heads are consecutive)
      for (size_t i = 0; i < plan->prefixes.size(); ++i) {
        const ViewRowsPlan::Prefix& p = plan->prefixes[i];
        if (held.empty() || p.view != held_view) {  // (by object: a moved-from view has id 0)
          held.push_back(view_copies_.get(name_, ctx.stage, ctx.stream, *plan, i, row_bytes));
          held_view = p.view;
        }
        const ViewLayerCopy& vc = *held.back();
        const ViewLayerCopy::Head& h = vc.heads.at(p.head);
        at_k[i] = h.k, at_v[i] = h.v;
        if (p.packed()) {
          any_packed = true;
          packed_k[i] = h.qk, packed_v[i] = h.qv;
          if (packed_k[i].positions != nullptr) packed_k[i].rope_table = rope;
          if (packed_v[i].positions != nullptr) packed_v[i].rope_table = rope;
        }
      }
      // Per (row, head): where its kept rows are and how many.
      std::vector<const void*> ptr_k(M * nkv), ptr_v(M * nkv);
      std::vector<int32_t> counts(M * nkv);
      for (size_t i = 0; i < M * nkv; ++i) {
        const size_t p = size_t(plan->prefix_of[i]);
        ptr_k[i] = at_k[p], ptr_v[i] = at_v[p], counts[i] = int32_t(plan->prefixes[p].rows);
      }
      const size_t qb = M * n_heads * hd * sizeof(float);
      const size_t ws = cuda::attention_mixed_workspace_floats(M, n_heads, hd, plan->max_entries);
      check(ctx.ptrs.reserve(2 * M * nkv * sizeof(void*)), "allocating row pointers");
      check(ctx.counts.reserve(M * nkv * sizeof(int32_t)), "allocating row counts");
      check(ctx.tail_begin.reserve(M * sizeof(int32_t)), "allocating tail starts");
      check(ctx.n_ctx.reserve(M * sizeof(int32_t)), "allocating context lengths");
      check(ctx.tables.reserve(plan->tables.size() * sizeof(int32_t)), "allocating block tables");
      check(ctx.q.reserve(qb), "allocating queries");
      check(ctx.out.reserve(qb), "allocating outputs");
      check(ctx.workspace.reserve(std::max<size_t>(1, ws) * sizeof(float)), "allocating the workspace");
      auto* dptr = static_cast<const void**>(ctx.ptrs.get());
      auto up = [&](void* to, const void* from, size_t bytes, const char* what) {
        check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, s), what);
      };
      up(dptr, ptr_k.data(), M * nkv * sizeof(void*), "copying row pointers");
      up(dptr + M * nkv, ptr_v.data(), M * nkv * sizeof(void*), "copying row pointers");
      up(ctx.counts.get(), counts.data(), M * nkv * sizeof(int32_t), "copying row counts");
      up(ctx.tail_begin.get(), plan->tail_begin.data(), M * sizeof(int32_t), "copying tail starts");
      up(ctx.n_ctx.get(), n_ctx.data(), M * sizeof(int32_t), "copying context lengths");
      up(ctx.tables.get(), plan->tables.data(), plan->tables.size() * sizeof(int32_t), "copying block tables");
      check(cudaMemcpyAsync(ctx.q.get(), q, qb, cudaMemcpyDefault, s), "copying queries");  // host or device
      cuda::MixedKvRows r;
      r.prefix_k = dptr;
      r.prefix_v = dptr + M * nkv;
      r.prefix_count = static_cast<const int32_t*>(ctx.counts.get());
      r.k = dk;
      r.v = dv;
      r.dtype = cfg.dtype;
      r.block_tokens = cfg.block_tokens;
      r.kv_heads = nkv;
      r.head_dim = hd;
      r.block_tables = static_cast<const int32_t*>(ctx.tables.get());
      r.table_stride = plan->table_stride;
      r.tail_begin = static_cast<const int32_t*>(ctx.tail_begin.get());
      r.n_ctx = static_cast<const int32_t*>(ctx.n_ctx.get());
      r.max_entries = plan->max_entries;
      if (any_packed) {  // per (row, head): a packed prefix's descriptors, else none (codes null)
        std::vector<cuda::QuantPrefixSide> quant(2 * M * nkv);
        for (size_t i = 0; i < M * nkv; ++i) {
          const size_t p = size_t(plan->prefix_of[i]);
          if (plan->prefixes[p].packed()) quant[i] = packed_k[p], quant[M * nkv + i] = packed_v[p];
        }
        check(ctx.quant.reserve(quant.size() * sizeof(cuda::QuantPrefixSide)), "allocating prefix descriptors");
        up(ctx.quant.get(), quant.data(), quant.size() * sizeof(cuda::QuantPrefixSide),
           "copying prefix descriptors");
        r.prefix_quant_k = static_cast<const cuda::QuantPrefixSide*>(ctx.quant.get());
        r.prefix_quant_v = r.prefix_quant_k + M * nkv;
      }
      check(cuda::launch_attention_rows_mixed(static_cast<const float*>(ctx.q.get()), M, n_heads, r,
                                              scale, static_cast<float*>(ctx.out.get()),
                                              static_cast<float*>(ctx.workspace.get()), ws, s),
            "the drafter's attention");
      check(cudaMemcpyAsync(out, ctx.out.get(), qb, cudaMemcpyDefault, s), "copying outputs");
      check(cudaStreamSynchronize(s), "the attention's stream");
    });
  }

  /// The RoPE table (cpu::rope_table's rows) for `inv_freq` up to position
  /// max_pos on ctx's device, made or grown (in steps of 4096 rows) as needed.
  const float* rope_table(PassContext& ctx, const float* inv_freq, size_t hd, int32_t max_pos) {
    const size_t h = hd / 2, rows = (size_t(max_pos) / 4096 + 1) * 4096;
    if (ctx.rope_rows < size_t(max_pos) + 1 || !std::equal(inv_freq, inv_freq + h, ctx.rope_freq.begin(),
                                                          ctx.rope_freq.end())) {
      const float* host = cpu::rope_table(inv_freq, h, rows - 1);
      ctx.rope_rows = 0;
      cudaError_t e = ctx.rope.reserve(rows * hd * sizeof(float));
      if (e == cudaSuccess)
        e = cudaMemcpyAsync(ctx.rope.get(), host, rows * hd * sizeof(float), cudaMemcpyHostToDevice, ctx.stream);
      if (e != cudaSuccess) throw Error("device " + name_ + ": the RoPE table: " + cuda_error(e));
      ctx.rope_freq.assign(inv_freq, inv_freq + h);
      ctx.rope_rows = rows;
    }
    return static_cast<const float*>(ctx.rope.get());
  }

  /// Runs fn(ctx, K, V) -- K and V: layer `layer` of the cache's device copy --
  /// once the blocks in `needed` are current there, holding the copy meanwhile.
  template <class Fn>
  void with_cache_copy(const PagedKvCache& cache, size_t layer, std::span<const int32_t> needed,
                       Fn&& fn) {
    const KvCacheConfig& cfg = cache.config();
    const std::shared_ptr<CacheCopy> mirror = cache_copies_.of(cache);
    std::lock_guard hold(mirror->mu);
    std::unique_ptr<PassContext> ctx = take_context();
    try {
      if (cudaSetDevice(index_) != cudaSuccess || (ctx->stream == nullptr &&
          cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking) != cudaSuccess))
        throw Error("device " + name_ + ": cannot set up a stream: " + cuda_error(cudaGetLastError()));
      KvSequence none;  // the layer's base pointers only
      const cpu::PagedKv host = cache.view(layer, none);
      const size_t block_bytes = cfg.kv_heads * cfg.block_tokens * cfg.head_dim * dtype_size(cfg.dtype);
      int32_t top = -1;
      for (const int32_t b : needed) top = std::max(top, b);
      mirror->grow(name_, cfg, size_t(top + 1), ctx->stream);
      auto* dk = static_cast<std::byte*>(mirror->storage.get()) + layer * 2 * mirror->layer_bytes;
      auto* dv = dk + mirror->layer_bytes;
      const auto* hk = static_cast<const std::byte*>(host.k);
      const auto* hv = static_cast<const std::byte*>(host.v);
      for (const auto& [first, count] : mirror->blocks->stale(layer, needed)) {
        const size_t off = size_t(first) * block_bytes, bytes = size_t(count) * block_bytes;
        for (const auto& [to, from] : {std::pair{dk, hk}, std::pair{dv, hv}}) {
          const cudaError_t e = cudaMemcpyAsync(to + off, from + off, bytes,
                                                cudaMemcpyHostToDevice, ctx->stream);
          if (e != cudaSuccess)
            throw Error("device " + name_ + ": copying KV blocks to the cache's copy: " + cuda_error(e));
        }
      }
      fn(*ctx, static_cast<const void*>(dk), static_cast<const void*>(dv));
    } catch (...) {
      drop_copy(cache, *mirror, std::move(ctx));
      throw;
    }
    give_back(std::move(ctx));
  }

  // After a failure with `mirror` held: the copy may be part-written, and its blocks
  // already count as current, so a thread waiting on its lock would read them. The
  // stream settles, every block is marked stale, and the copy is dropped (rebuilt on
  // its next use); the context goes back.
  void drop_copy(const PagedKvCache& cache, CacheCopy& mirror, std::unique_ptr<PassContext> ctx) {
    if (ctx->stream != nullptr) (void)cudaStreamSynchronize(ctx->stream);
    (void)cudaGetLastError();
    mirror.blocks = std::make_unique<KvMirror>(cache);
    cache_copies_.forget(cache.id());
    give_back(std::move(ctx));
  }

  std::unique_ptr<PassContext> take_context() {
    std::lock_guard lock(mu_);
    if (free_.empty()) return std::make_unique<PassContext>();
    std::unique_ptr<PassContext> ctx = std::move(free_.back());
    free_.pop_back();
    return ctx;
  }

  void give_back(std::unique_ptr<PassContext> ctx) override {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(ctx));
  }
  [[nodiscard]] int index() const override { return index_; }
  [[nodiscard]] const std::string& name() const override { return name_; }

  [[nodiscard]] size_t device_bytes() const override {
    size_t bytes = cache_copies_.bytes() + view_copies_.bytes();
    std::lock_guard lock(mu_);
    for (const auto& c : free_) bytes += c->bytes();  // passes' buffers not in use
    return bytes;
  }

 private:
  int index_;
  std::string name_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<PassContext>> free_;
  CacheCopies cache_copies_;
  ViewCopies view_copies_;
};

}  // namespace

std::shared_ptr<AttentionBackend> make_cuda_attention(int index) {
  auto backend = std::make_shared<CudaAttention>(index);
  // Staging buffers allocated from now on are pinned, so verify chunks go up by DMA.
  if (host_pinner() == nullptr) install_host_pinner(std::make_shared<CudaHostPinner>());
  return backend;
}

}  // namespace vc

// The CUDA attention pass over KV a full tier streams in, and the launch of the paged
// attention kernel both it and the backend's rows over cached KV use (cuda_pass.hpp).
#include "runtime/cuda/cuda_pass.hpp"

#include <algorithm>
#include <optional>

#include "kernels/cuda/attention.cuh"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/staging_ring.hpp"

namespace vc::cuda_backend {

/// Rows over device KV at `k`/`v` (layout of `shape`) through host block tables
/// [M, stride]: queries up, the kernel, outputs back, on ctx's stream; waits.
void launch_rows(PassContext& ctx, const std::string& dev, const void* k, const void* v,
                 const cpu::PagedKv& shape, std::span<const int32_t> tables, size_t stride,
                 std::span<const int32_t> n_ctx, size_t n_heads, float scale, const float* q,
                 float* out) {
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw Error("device " + dev + ": " + what + ": " + cuda_error(e));
  };
  const size_t M = n_ctx.size(), hd = shape.head_dim, bt = shape.block_tokens;
  size_t max_ctx = 0;
  for (const int32_t n : n_ctx) max_ctx = std::max(max_ctx, size_t(n));
  if (max_ctx == 0) {  // no row attends to anything: zeros, as the kernel gives them
    if (!cuda_backend::is_device_memory(out)) {
      std::fill_n(out, M * n_heads * hd, 0.0f);
      return;
    }
    check(cudaMemsetAsync(out, 0, M * n_heads * hd * sizeof(float), ctx.stream), "zeroing outputs");
    check(cudaStreamSynchronize(ctx.stream), "the attention's stream");
    return;
  }
  const size_t qb = M * n_heads * hd * sizeof(float);
  const size_t ws = cuda::attention_workspace_floats(M, n_heads, hd, bt, max_ctx);
  check(ctx.q.reserve(qb), "allocating queries");
  check(ctx.out.reserve(qb), "allocating outputs");
  check(ctx.tables.reserve(tables.size() * sizeof(int32_t)), "allocating block tables");
  check(ctx.n_ctx.reserve(M * sizeof(int32_t)), "allocating context lengths");
  check(ctx.workspace.reserve(std::max<size_t>(1, ws) * sizeof(float)), "allocating the workspace");
  cudaStream_t s = ctx.stream;
  // Queries and outputs on the host, or on the device (a model's rows kept there).
  check(cudaMemcpyAsync(ctx.q.get(), q, qb, cudaMemcpyDefault, s), "copying queries");
  check(cudaMemcpyAsync(ctx.tables.get(), tables.data(), tables.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice, s),
        "copying block tables");
  check(cudaMemcpyAsync(ctx.n_ctx.get(), n_ctx.data(), M * sizeof(int32_t),
                        cudaMemcpyHostToDevice, s),
        "copying context lengths");
  cuda::PagedKvRows rows;
  rows.k = k;
  rows.v = v;
  rows.dtype = shape.dtype;
  rows.block_tokens = bt;
  rows.kv_heads = shape.kv_heads;
  rows.head_dim = hd;
  rows.block_tables = static_cast<const int32_t*>(ctx.tables.get());
  rows.table_stride = stride;
  rows.n_ctx = static_cast<const int32_t*>(ctx.n_ctx.get());
  rows.max_ctx = max_ctx;
  check(cuda::launch_attention_rows(static_cast<const float*>(ctx.q.get()), M, n_heads, rows,
                                    scale, static_cast<float*>(ctx.out.get()),
                                    static_cast<float*>(ctx.workspace.get()), ws, s),
        "attention");
  check(cudaMemcpyAsync(out, ctx.out.get(), qb, cudaMemcpyDefault, s), "copying outputs");
  check(cudaStreamSynchronize(s), "the attention's stream");
}

namespace {

class CudaPass final : public AttentionBackend::Pass {
 public:
  CudaPass(PassOwner& owner, std::unique_ptr<PassContext> ctx, size_t n_heads, const cpu::PagedKv& shape,
           std::span<const int32_t> n_ctx, size_t max_blocks, float scale);
  ~CudaPass() override;
  void queries(const float* q) override;
  void add(size_t r0, size_t r1, const cpu::PagedKv& kv, size_t b_begin, size_t b_end,
           std::shared_ptr<const void> keep) override;
  void run(const float* q, float* out) override;

 private:
  void check(cudaError_t e, const char* what) const;
  void add_to_ring(const cpu::PagedKv& kv, size_t b_begin, size_t b_end, bool lent);
  /// Chunked mode: chunks [ring_->launched(), upto) launched once the copies queued
  /// so far are in.
  void launch_upto(size_t upto);
  /// One past the last block of the run from logical block j (< b_end) of `kv`:
  /// consecutive physical blocks, within one group of `split` blocks when split > 0.
  /// Throws for a released block.
  [[nodiscard]] size_t run_end(const cpu::PagedKv& kv, size_t j, size_t b_end, size_t split) const;
  /// Queues the K and V of n physical blocks of `kv` from block p0 into slots
  /// [slot, slot + n) of the pass's pool, on `stream`.
  void copy_blocks(const cpu::PagedKv& kv, int32_t p0, size_t n, size_t slot, cudaStream_t stream);
  /// The kernel's view of the staged blocks and the rows (device tables, n_ctx).
  [[nodiscard]] cuda::PagedKvRows rows_view() const;

  PassOwner& owner_;
  std::unique_ptr<PassContext> ctx_;
  size_t n_heads_;
  cpu::PagedKv shape_;
  std::vector<int32_t> n_ctx_;
  size_t max_blocks_;
  float scale_;
  size_t block_bytes_;   // one block of one layer's K (or V)
  size_t stride_ = 0;    // table entries per row: blocks of the longest row
  size_t max_ctx_ = 0;
  size_t used_ = 0;      // blocks staged so far (whole mode)
  std::vector<int32_t> tables_;  // [M, stride_]: logical block -> staged slot, -1 unset
  // Chunked mode (queries given first): where each block goes, what each add
  // completes; the workspace size for the rows.
  std::optional<StagingRing> ring_;
  size_t workspace_floats_ = 0;
  // Host memory of copies that may still be in flight (lent blocks): dropped after
  // the streams are synchronized (run, or the destructor's sync, which runs first).
  std::vector<std::shared_ptr<const void>> keeps_;
};

CudaPass::CudaPass(PassOwner& owner, std::unique_ptr<PassContext> ctx, size_t n_heads,
                   const cpu::PagedKv& shape, std::span<const int32_t> n_ctx, size_t max_blocks,
                   float scale)
    : owner_(owner), ctx_(std::move(ctx)), n_heads_(n_heads), shape_(shape),
      n_ctx_(n_ctx.begin(), n_ctx.end()), max_blocks_(max_blocks), scale_(scale),
      block_bytes_(shape.kv_heads * shape.block_tokens * shape.head_dim * dtype_size(shape.dtype)) {
  if (shape.block_tokens == 0 || shape.kv_heads == 0 || shape.head_dim == 0)
    throw Error("device " + owner_.name() + ": attention over KV of an empty shape");
  for (const int32_t n : n_ctx_) {
    if (n < 0) throw Error("device " + owner_.name() + ": a row attends to a negative context");
    max_ctx_ = std::max(max_ctx_, size_t(n));
  }
  stride_ = std::max<size_t>(1, (max_ctx_ + shape.block_tokens - 1) / shape.block_tokens);
  tables_.assign(n_ctx_.size() * stride_, -1);
  // The current device is the calling thread's: set it for every pass.
  check(cudaSetDevice(owner_.index()), "cudaSetDevice");
  if (ctx_->stream == nullptr)
    check(cudaStreamCreateWithFlags(&ctx_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

CudaPass::~CudaPass() {
  (void)cudaSetDevice(owner_.index());  // the calling thread's current device may be another
  if (ctx_->copy != nullptr) cudaStreamSynchronize(ctx_->copy);
  if (ctx_->stream != nullptr) cudaStreamSynchronize(ctx_->stream);
  (void)cudaGetLastError();
  owner_.give_back(std::move(ctx_));
}

void CudaPass::check(cudaError_t e, const char* what) const {
  if (e != cudaSuccess) throw Error("device " + owner_.name() + ": " + what + ": " + cuda_error(e));
}

cuda::PagedKvRows CudaPass::rows_view() const {
  cuda::PagedKvRows rows;
  rows.k = ctx_->k.get();
  rows.v = ctx_->v.get();
  rows.dtype = shape_.dtype;
  rows.block_tokens = shape_.block_tokens;
  rows.kv_heads = shape_.kv_heads;
  rows.head_dim = shape_.head_dim;
  rows.block_tables = static_cast<const int32_t*>(ctx_->tables.get());
  rows.table_stride = stride_;
  rows.n_ctx = static_cast<const int32_t*>(ctx_->n_ctx.get());
  rows.max_ctx = max_ctx_;
  return rows;
}

// Chunked mode: the queries, block tables (block b in ring slot b mod slots, the same
// for every row: one sequence's rows) and context lengths go up on the pass's
// stream; chunks are then launched by add() as they complete.
void CudaPass::queries(const float* q) {
  const size_t M = n_ctx_.size();
  if (M == 0 || max_ctx_ == 0) return;
  if (used_ > 0 || ring_) throw Error("device " + owner_.name() + ": queries given after blocks");
  check(cudaSetDevice(owner_.index()), "cudaSetDevice");
  const size_t bt = shape_.block_tokens, cb = cuda::attention_chunk_positions(bt) / bt;
  ring_.emplace(stride_, cb, kRingChunks);
  for (size_t m = 0; m < M; ++m)
    for (size_t b = 0; b < stride_; ++b) tables_[m * stride_ + b] = int32_t(ring_->slot(b));
  const size_t pool = ring_->slots() * block_bytes_, qb = M * n_heads_ * shape_.head_dim * sizeof(float);
  workspace_floats_ = cuda::attention_workspace_floats(M, n_heads_, shape_.head_dim, bt, max_ctx_);
  check(ctx_->k.reserve(pool), "allocating the ring of K blocks");
  check(ctx_->v.reserve(pool), "allocating the ring of V blocks");
  check(ctx_->q.reserve(qb), "allocating queries");
  check(ctx_->out.reserve(qb), "allocating outputs");
  check(ctx_->tables.reserve(tables_.size() * sizeof(int32_t)), "allocating block tables");
  check(ctx_->n_ctx.reserve(M * sizeof(int32_t)), "allocating context lengths");
  check(ctx_->workspace.reserve(std::max<size_t>(1, workspace_floats_) * sizeof(float)),
        "allocating the workspace");
  if (ctx_->copy == nullptr)
    check(cudaStreamCreateWithFlags(&ctx_->copy, cudaStreamNonBlocking), "creating a copy stream");
  if (ctx_->copied == nullptr)
    check(cudaEventCreateWithFlags(&ctx_->copied, cudaEventDisableTiming), "creating an event");
  while (ctx_->consumed.size() < kRingChunks) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event");
    ctx_->consumed.push_back(e);
  }
  cudaStream_t s = ctx_->stream;
  check(cudaMemcpyAsync(ctx_->q.get(), q, qb, cudaMemcpyDefault, s), "copying queries");  // host or device
  check(cudaMemcpyAsync(ctx_->tables.get(), tables_.data(), tables_.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice, s),
        "copying block tables");
  check(cudaMemcpyAsync(ctx_->n_ctx.get(), n_ctx_.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice, s),
        "copying context lengths");
  // The copy stream's first copies wait for nothing the pass's stream holds except
  // these uploads (the ring's slots are free at first).
  check(cudaStreamSynchronize(s), "the attention's stream");
}

void CudaPass::add(size_t r0, size_t r1, const cpu::PagedKv& kv, size_t b_begin, size_t b_end,
                   std::shared_ptr<const void> keep) {
  if (r1 > n_ctx_.size() || r0 > r1)
    throw Error("device " + owner_.name() + ": rows [" + std::to_string(r0) + ", " +
                std::to_string(r1) + ") of a pass of " + std::to_string(n_ctx_.size()));
  if (kv.dtype != shape_.dtype || kv.block_tokens != shape_.block_tokens ||
      kv.kv_heads != shape_.kv_heads || kv.head_dim != shape_.head_dim)
    throw Error("device " + owner_.name() + ": KV blocks of another shape than the pass's");
  if (ring_ && (r0 != 0 || r1 != n_ctx_.size()))
    throw Error("device " + owner_.name() + ": a chunked pass takes blocks for all its rows at once");
  check(cudaSetDevice(owner_.index()), "cudaSetDevice");  // per call: another thread may add
  b_end = std::min(b_end, stride_);  // blocks past every row's context: nobody reads them
  if (b_end <= b_begin) return;
  // Held from before the first copy: a throw below leaves copies in flight.
  const bool lent = keep != nullptr;
  if (lent) keeps_.push_back(std::move(keep));
  if (ring_) return add_to_ring(kv, b_begin, b_end, lent);
  if (used_ + (b_end - b_begin) > max_blocks_)
    throw Error("device " + owner_.name() + ": more KV blocks added than the pass was sized for (" +
                std::to_string(max_blocks_) + ")");
  const size_t pool = std::max<size_t>(1, max_blocks_) * block_bytes_;
  check(ctx_->k.reserve(pool), "allocating staged K blocks");
  check(ctx_->v.reserve(pool), "allocating staged V blocks");
  // Runs of consecutive physical blocks go in one copy each (a sequence's blocks
  // are mostly allocated in order).
  for (size_t j = b_begin; j < b_end;) {
    const size_t e = run_end(kv, j, b_end, 0), n = e - j;
    copy_blocks(kv, kv.block_table[j], n, used_, ctx_->stream);
    for (size_t b = j; b < e; ++b)
      for (size_t r = r0; r < r1; ++r) tables_[r * stride_ + b] = int32_t(used_ + (b - j));
    used_ += n;
    j = e;
  }
  if (lent) return;  // lent blocks stay put: their copies run on behind the next chunk's
  // The caller may reuse the host blocks once this returns.
  check(cudaStreamSynchronize(ctx_->stream), "the attention's copy stream");
}

// Blocks go up on the copy stream into their ring slots, a slot's copy waiting for
// the launch that read its previous block; the chunks they complete are launched on
// the pass's stream once the copies are in (an event), each launch recorded as its
// ring chunks' consumer.
void CudaPass::add_to_ring(const cpu::PagedKv& kv, size_t b_begin, size_t b_end, bool lent) {
  StagingRing& ring = *ring_;
  const size_t cb = ring.chunk_blocks();
  size_t ready = ring.launched();
  for (size_t j = b_begin; j < b_end;) {
    // A run within one attention chunk (one slot range of the ring, one event).
    const size_t e = run_end(kv, j, b_end, cb);
    const size_t chunk = j / cb;
    // The slots' previous chunk may be complete but not launched yet (an add of more
    // than the ring holds): it goes first.
    const size_t ring_chunks = ring.ring_chunks();
    if (chunk >= ring_chunks && chunk - ring_chunks >= ring.launched() && ready > ring.launched())
      launch_upto(ready);
    for (size_t b = j; b < e; ++b) ring.check_free(b);
    if (chunk >= ring_chunks)  // the slots held an earlier chunk: wait for its reader
      check(cudaStreamWaitEvent(ctx_->copy, ctx_->consumed[ring.ring_chunk(chunk)], 0), "waiting for a slot");
    copy_blocks(kv, kv.block_table[j], e - j, ring.slot(j), ctx_->copy);
    for (size_t b = j; b < e; ++b) ready = ring.stage(b);
    j = e;
  }
  if (ready > ring.launched()) launch_upto(ready);
  if (lent) return;  // their copies run on behind the next chunk's
  // The caller may reuse the host blocks once this returns.
  check(cudaStreamSynchronize(ctx_->copy), "the attention's copy stream");
}

size_t CudaPass::run_end(const cpu::PagedKv& kv, size_t j, size_t b_end, size_t split) const {
  const int32_t p0 = kv.block_table[j];
  if (p0 < 0)
    throw Error("device " + owner_.name() + ": logical KV block " + std::to_string(j) + " has been released");
  size_t e = j + 1;
  while (e < b_end && (split == 0 || e % split != 0) && kv.block_table[e] == p0 + int32_t(e - j)) ++e;
  return e;
}

void CudaPass::copy_blocks(const cpu::PagedKv& kv, int32_t p0, size_t n, size_t slot, cudaStream_t stream) {
  const size_t bytes = n * block_bytes_;
  check(cudaMemcpyAsync(static_cast<std::byte*>(ctx_->k.get()) + slot * block_bytes_,
                        static_cast<const std::byte*>(kv.k) + size_t(p0) * block_bytes_, bytes,
                        cudaMemcpyHostToDevice, stream),
        "copying K blocks");
  check(cudaMemcpyAsync(static_cast<std::byte*>(ctx_->v.get()) + slot * block_bytes_,
                        static_cast<const std::byte*>(kv.v) + size_t(p0) * block_bytes_, bytes,
                        cudaMemcpyHostToDevice, stream),
        "copying V blocks");
}

void CudaPass::launch_upto(size_t upto) {
  StagingRing& ring = *ring_;
  check(cudaEventRecord(ctx_->copied, ctx_->copy), "recording the copies");
  check(cudaStreamWaitEvent(ctx_->stream, ctx_->copied, 0), "waiting for the copies");
  check(cuda::launch_attention_chunks(static_cast<const float*>(ctx_->q.get()), n_ctx_.size(), n_heads_,
                                      rows_view(), scale_, static_cast<float*>(ctx_->workspace.get()),
                                      workspace_floats_, ring.launched(), upto, ctx_->stream),
        "attention");
  // (at most the ring's chunks were staged and not launched)
  for (size_t c = ring.launched(); c < upto; ++c)
    check(cudaEventRecord(ctx_->consumed[ring.ring_chunk(c)], ctx_->stream), "recording a launch");
  ring.launched_upto(upto);
}

void CudaPass::run(const float* q, float* out) {
  const size_t M = n_ctx_.size();
  if (M == 0) return;
  check(cudaSetDevice(owner_.index()), "cudaSetDevice");
  const size_t bt = shape_.block_tokens;
  for (size_t m = 0; m < M; ++m) {
    const size_t need = (size_t(n_ctx_[m]) + bt - 1) / bt;
    for (size_t b = 0; b < need; ++b)
      if (ring_ ? !ring_->staged(b) : tables_[m * stride_ + b] < 0)
        throw Error("device " + owner_.name() + ": row " + std::to_string(m) +
                    " of the pass attends to KV block " + std::to_string(b) +
                    ", which was not staged");
  }
  if (!ring_) {
    launch_rows(*ctx_, owner_.name(), ctx_->k.get(), ctx_->v.get(), shape_, tables_, stride_,
                n_ctx_, n_heads_, scale_, q, out);
  } else {  // every chunk was launched as its blocks came (all are staged): the merge
    // (an add that threw after staging blocks may have left complete chunks unlaunched)
    if (ring_->launched() < ring_->chunks()) launch_upto(ring_->chunks());
    const size_t qb = M * n_heads_ * shape_.head_dim * sizeof(float);
    check(cuda::launch_attention_merge(M, n_heads_, rows_view(), static_cast<float*>(ctx_->out.get()),
                                       static_cast<const float*>(ctx_->workspace.get()), workspace_floats_,
                                       ctx_->stream),
          "attention");
    check(cudaMemcpyAsync(out, ctx_->out.get(), qb, cudaMemcpyDefault, ctx_->stream), "copying outputs");
    check(cudaStreamSynchronize(ctx_->stream), "the attention's stream");
  }
  if (!keeps_.empty()) {  // (launch_rows has synchronized, unless no row attends to anything)
    if (ctx_->copy != nullptr) check(cudaStreamSynchronize(ctx_->copy), "the attention's copy stream");
    check(cudaStreamSynchronize(ctx_->stream), "the attention's copy stream");
    keeps_.clear();
  }
}

}  // namespace

std::unique_ptr<AttentionBackend::Pass> make_pass(PassOwner& owner, std::unique_ptr<PassContext> ctx,
                                                  size_t n_heads, const cpu::PagedKv& shape,
                                                  std::span<const int32_t> n_ctx, size_t max_blocks,
                                                  float scale) {
  return std::make_unique<CudaPass>(owner, std::move(ctx), n_heads, shape, n_ctx, max_blocks, scale);
}

}  // namespace vc::cuda_backend

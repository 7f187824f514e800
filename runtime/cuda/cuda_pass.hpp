// What the CUDA attention backend's calls share (runtime/cuda/cuda_attention.cpp): a
// caller's context (streams, buffers), the launch of the paged attention kernel over
// KV in device memory, and the pass over KV a full tier streams in
// (AttentionBackend::Pass), which copies the blocks its rows read to the device and
// attends to them there.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/cuda/device_buffer.hpp"

namespace vc::cuda_backend {

/// One caller's stream and buffers: the staged K and V blocks, queries, outputs,
/// block tables, context lengths and the kernel's workspace; for a pass that attends
/// as its blocks arrive, a copy stream and its events.
struct PassContext {
  cudaStream_t stream = nullptr;
  cudaStream_t copy = nullptr;            // a chunked pass's copies
  cudaEvent_t copied = nullptr;           // the copies of the latest add, on `copy`
  std::vector<cudaEvent_t> consumed;      // per ring chunk: its latest reader launched
  DeviceBuffer k, v, q, out, tables, n_ctx, workspace;
  DeviceBuffer ptrs, counts, tail_begin;  // the drafter's rows: kept rows per (row, head)
  DeviceBuffer quant;                      // packed prefixes' descriptors per (row, head)
  std::vector<std::byte> stage;            // a view's kept rows gathered on the host
  std::vector<int32_t> places;             // rows' [blocks][offsets] for the cache copy's stores
  DeviceBuffer rope;                       // RoPE table: [rope_rows][cos h][sin h]
  std::vector<float> rope_freq;            // the frequencies it was made for
  size_t rope_rows = 0;
  PassContext() = default;
  PassContext(const PassContext&) = delete;
  PassContext& operator=(const PassContext&) = delete;
  ~PassContext() {
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (copy != nullptr) cudaStreamDestroy(copy);
    if (copied != nullptr) cudaEventDestroy(copied);
    for (cudaEvent_t e : consumed) cudaEventDestroy(e);
  }
  /// Device bytes held.
  [[nodiscard]] size_t bytes() const {
    size_t b = 0;
    for (const DeviceBuffer* d : {&k, &v, &q, &out, &tables, &n_ctx, &workspace, &ptrs, &counts, &tail_begin,
                                  &quant, &rope})
      b += d->bytes();
    return b;
  }
};

/// Rows over device KV at `k`/`v` (layout of `shape`) through host block tables
/// [M, stride]: queries up, the kernel, outputs back, on ctx's stream; waits.
void launch_rows(PassContext& ctx, const std::string& dev, const void* k, const void* v,
                 const cpu::PagedKv& shape, std::span<const int32_t> tables, size_t stride,
                 std::span<const int32_t> n_ctx, size_t n_heads, float scale, const float* q,
                 float* out);

/// What a pass needs of the backend that made it.
class PassOwner {
 public:
  virtual ~PassOwner() = default;
  [[nodiscard]] virtual int index() const = 0;
  [[nodiscard]] virtual const std::string& name() const = 0;
  /// Takes the pass's context back for the next caller.
  virtual void give_back(std::unique_ptr<PassContext> ctx) = 0;
};

/// A pass of n_ctx.size() rows (AttentionBackend::begin) on `ctx`. Given its queries
/// before its blocks (Pass::queries), it attends chunk by chunk as they arrive, its
/// blocks in a ring of kRingChunks attention chunks (runtime/staging_ring.hpp) filled
/// on a copy stream while the kernel reads the chunks before; else it stages every
/// block it is given, up to max_blocks, and attends once in run().
[[nodiscard]] std::unique_ptr<AttentionBackend::Pass> make_pass(PassOwner& owner,
                                                                std::unique_ptr<PassContext> ctx,
                                                                size_t n_heads, const cpu::PagedKv& shape,
                                                                std::span<const int32_t> n_ctx,
                                                                size_t max_blocks, float scale);

/// Attention chunks (kernels/cuda/attention.cuh) a chunked pass's ring holds: 16 of
/// 256 positions, 4096 positions of K and V per pass.
constexpr size_t kRingChunks = 16;

}  // namespace vc::cuda_backend

// The CUDA LinearBackend: weights in device memory, each product one launch of the
// batch-invariant matmul kernel (kernels/cuda/matmul.cuh) on a stream of the calling
// thread's own context. A prompt's rows go through cuBLASLt instead (prompt_gemm.hpp),
// in tiles of kPromptTileRows rows rounded to bf16. Over host rows (linear,
// linear_prompt) rows go up and results come back with every call; rows() keeps a
// whole pass on the device (runtime/device_rows.hpp, CudaRows below), with the norm
// weights and the embedding there too, and the same products.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/add_inplace.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/to_bf16.cuh"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/cuda/device_buffer.hpp"
#include "runtime/cuda/prompt_gemm.hpp"
#include "runtime/linear_backend.hpp"

namespace vc {
namespace {

using cuda_backend::cuda_error;
using cuda_backend::DeviceBuffer;
using cuda_backend::kPromptTileRows;
using cuda_backend::kPromptWorkspaceBytes;
using cuda_backend::PromptGemm;
using cuda_backend::PromptPlan;
using cuda_backend::require_device;

/// One caller's stream and buffers for rows in and results out; for prompt rows,
/// a cuBLASLt handle, a tile of bf16 rows, the GEMM's workspace and output tile; for
/// a pass on the device (CudaRows), its activations, token ids, positions and RoPE
/// frequencies.
struct CallContext {
  cudaStream_t stream = nullptr;
  DeviceBuffer x, y;
  cublasLtHandle_t lt = nullptr;  // made only once cuBLASLt is loaded
  DeviceBuffer x_bf16, workspace, tile;
  DeviceBuffer act[DeviceRows::kBufs];
  DeviceBuffer ids, positions, inv_freq;
  std::vector<float> inv_freq_host;  // what inv_freq holds
  [[nodiscard]] size_t bytes() const {
    size_t b = x.bytes() + y.bytes() + x_bf16.bytes() + workspace.bytes() + tile.bytes() +
               ids.bytes() + positions.bytes() + inv_freq.bytes();
    for (const DeviceBuffer& a : act) b += a.bytes();
    return b;
  }
  ~CallContext() {
    if (lt != nullptr) cuda_backend::cublaslt(nullptr)->destroy(lt);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class CudaRows;

class CudaLinear final : public LinearBackend {
 public:
  CudaLinear(std::span<const Weight> mats, std::span<const Weight> biases,
             std::span<const Weight> vectors, int index)
      : index_(index), whole_passes_(!vectors.empty()) {
    const std::string dev = "device cuda:" + std::to_string(index);
    require_device(index);
    check(cudaSetDevice(index_), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index_), "cudaGetDeviceProperties");
    description_ = "cuda:" + std::to_string(index_) + " (" + prop.name + ")";
    std::string why;
    const cuda_backend::CublasLt* lib = cuda_backend::cublaslt(&why);
    if (lib == nullptr)  // prompt rows then take the matmul kernel
      description_ += " [prompt rows on the matmul kernel: " + why + "]";
    numerics_ = "cuda " + std::string(prop.name) + " sm_" + std::to_string(prop.major) +
                std::to_string(prop.minor) + " " + std::to_string(prop.multiProcessorCount) +
                " SMs, prompt rows " +
                (lib != nullptr ? "cuBLASLt " + std::to_string(lib->version()) : std::string("matmul kernel")) +
                (whole_passes_ ? ", whole passes on the device" : "");

    size_t total = 0;
    std::vector<Weight> held(mats.begin(), mats.end());
    held.insert(held.end(), vectors.begin(), vectors.end());  // norm weights, as held
    std::unordered_map<const void*, size_t> distinct;  // tied embedding and LM head once
    for (const Weight& m : held) distinct[m.data] = m.rows * m.cols * dtype_size(m.dtype);
    for (const auto& [data, bytes] : distinct) total += data != nullptr ? bytes : 0;
    for (const Weight& m : held) {
      if (!m.present() || held_.count(m.data) != 0) continue;
      const size_t bytes = m.rows * m.cols * dtype_size(m.dtype);
      DeviceBuffer b;
      const cudaError_t a = b.reserve(bytes);
      if (a != cudaSuccess)
        throw Error(dev + ": the model's weight matrices (" + std::to_string(total >> 20) +
                    " MiB) do not fit in its memory (" + std::to_string(prop.totalGlobalMem >> 20) +
                    " MiB in all): " + cuda_error(a));
      check(cudaMemcpy(b.get(), m.data, bytes, cudaMemcpyHostToDevice), "copying weights");
      held_.emplace(m.data, std::move(b));
    }
    // Biases in f32 (the kernel's form), converted once.
    for (const Weight& b : biases) {
      if (!b.present() || held_.count(b.data) != 0) continue;
      std::vector<float> f(b.cols);
      to_f32(b.dtype, b.data, f.data(), f.size());
      DeviceBuffer d;
      check(d.reserve(f.size() * sizeof(float)), "allocating a bias");
      check(cudaMemcpy(d.get(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice),
            "copying a bias");
      held_.emplace(b.data, std::move(d));
    }
  }

  [[nodiscard]] const std::string& description() const override { return description_; }
  // The GPU's kind and SM count (cuBLASLt's choice of algorithm depends on both) and
  // what prompt rows run on; not the device's number.
  [[nodiscard]] std::string numerics() const override { return numerics_; }

  [[nodiscard]] size_t device_bytes() const override {
    size_t bytes = 0;
    for (const auto& [host, d] : held_) bytes += d.bytes();
    std::lock_guard lock(mu_);
    for (const auto& c : free_) bytes += c->bytes();  // callers' buffers not in use
    return bytes;
  }

  std::unique_ptr<DeviceRows> rows() override;

  void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (M == 0) return;
    Lease ctx(*this);
    start(*ctx);
    const size_t xb = M * w.cols * sizeof(float), yb = M * w.rows * sizeof(float);
    check(ctx->x.reserve(xb), "allocating rows");
    check(ctx->y.reserve(yb), "allocating results");
    float* dx = static_cast<float*>(ctx->x.get());
    float* dy = static_cast<float*>(ctx->y.get());
    check(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, ctx->stream), "copying rows");
    product(*ctx, dx, M, w, bias, dy, false);
    check(cudaMemcpyAsync(y, dy, yb, cudaMemcpyDeviceToHost, ctx->stream), "copying results");
    check(cudaStreamSynchronize(ctx->stream), "the matmul's stream");
  }

  // Rows go up a tile at a time (a long prompt's chunk in f32 could take gigabytes),
  // each tile's product as product() computes it over rows on the device.
  void linear_prompt(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (M == 0) return;
    Lease ctx(*this);
    start(*ctx);
    const size_t K = w.cols, N = w.rows, T = std::min(M, kPromptTileRows);
    check(ctx->x.reserve(T * K * sizeof(float)), "allocating rows");
    check(ctx->y.reserve(T * N * sizeof(float)), "allocating results");
    float* dx = static_cast<float*>(ctx->x.get());
    float* dy = static_cast<float*>(ctx->y.get());
    for (size_t r = 0; r < M; r += T) {
      const size_t m = std::min(T, M - r);
      check(cudaMemcpyAsync(dx, x + r * K, m * K * sizeof(float), cudaMemcpyHostToDevice, ctx->stream),
            "copying rows");
      product(*ctx, dx, m, w, bias, dy, true);
      check(cudaMemcpyAsync(y + r * N, dy, m * N * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream),
            "copying results");
    }
    check(cudaStreamSynchronize(ctx->stream), "the prompt GEMM's stream");
  }

  /// Queues dy[M, w.rows] = dx[M, w.cols] · w^T (+ bias) on ctx's stream, rows and
  /// results in device memory. Prompt rows (`prompt`) through cuBLASLt when the
  /// library loads and the matrix is bf16, in tiles of T rows rounded to bf16 (the
  /// last padded with zeros), else the matmul kernel, for every call of the process,
  /// so that a prompt row's bits stay one; other rows through the kernel.
  void product(CallContext& ctx, const float* dx, size_t M, const Weight& w, const Weight& bias,
               float* dy, bool prompt) {
    if (M == 0) return;
    const void* dw = find(w, "weight");
    const float* db = bias.present() ? static_cast<const float*>(find(bias, "bias")) : nullptr;
    const cuda_backend::CublasLt* lib = prompt ? cuda_backend::cublaslt(nullptr) : nullptr;
    if (lib != nullptr && w.dtype == DType::bf16) {
      const size_t K = w.cols, N = w.rows, T = kPromptTileRows;
      if (ctx.lt == nullptr) check_lt(*lib, lib->create(&ctx.lt), "cublasLtCreate");
      const PromptPlan& plan = prompt_.plan(*lib, ctx.lt, dw, N, K, db, description_);
      if (plan.usable) {
        check(ctx.x_bf16.reserve(T * K * sizeof(uint16_t)), "allocating bf16 rows");
        check(ctx.tile.reserve(T * N * sizeof(float)), "allocating a result tile");
        check(ctx.workspace.reserve(kPromptWorkspaceBytes), "allocating cuBLASLt's workspace");
        auto* xb = static_cast<uint16_t*>(ctx.x_bf16.get());
        float* ty = static_cast<float*>(ctx.tile.get());
        for (size_t r = 0; r < M; r += T) {
          // Every call has T rows: the last tile's are padded with zeros.
          const size_t m = std::min(T, M - r);
          check(cuda::launch_to_bf16(dx + r * K, m * K, xb, ctx.stream), "rounding rows to bf16");
          if (m < T)
            check(cudaMemsetAsync(xb + m * K, 0, (T - m) * K * sizeof(uint16_t), ctx.stream), "padding rows");
          check_lt(*lib, PromptGemm::run(ctx.lt, plan, dw, xb, ty, ctx.workspace.get(), ctx.stream),
                   "cublasLtMatmul");
          check(cudaMemcpyAsync(dy + r * N, ty, m * N * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream),
                "copying results");
        }
        return;
      }
      // no algorithm without a reduction for this matrix: the kernel
    }
    check(cuda::launch_matmul(dx, M, w.cols, dw, w.dtype, w.rows, db, dy, ctx.stream), "matmul");
  }

  /// The calling thread's device set (it is the thread's, so for every call) and
  /// ctx's stream made.
  void start(CallContext& ctx) const {
    check(cudaSetDevice(index_), "cudaSetDevice");
    if (ctx.stream == nullptr)
      check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  void check(cudaError_t e, const char* what) const {
    if (e != cudaSuccess)
      throw Error("device " + (description_.empty() ? "cuda:" + std::to_string(index_) : description_) +
                  ": " + what + ": " + cuda_error(e));
  }

  const void* find(const Weight& w, const char* what) const {
    const auto it = held_.find(w.data);
    if (it == held_.end())
      throw Error("device " + description_ + ": a " + what + " of " + std::to_string(w.rows) + "x" +
                  std::to_string(w.cols) + " that was not placed on it");
    return it->second.get();
  }

 private:
  /// A context from the free list (or a new one), returned when the call ends.
  class Lease {
   public:
    explicit Lease(CudaLinear& o) : owner_(o) {
      std::lock_guard lock(o.mu_);
      if (o.free_.empty()) {
        ctx_ = std::make_unique<CallContext>();
      } else {
        ctx_ = std::move(o.free_.back());
        o.free_.pop_back();
      }
    }
    ~Lease() {
      std::lock_guard lock(owner_.mu_);
      owner_.free_.push_back(std::move(ctx_));
    }
    CallContext* operator->() const { return ctx_.get(); }
    CallContext& operator*() const { return *ctx_; }

   private:
    CudaLinear& owner_;
    std::unique_ptr<CallContext> ctx_;
  };

  void check_lt(const cuda_backend::CublasLt& lib, cublasStatus_t s, const char* what) const {
    if (s != CUBLAS_STATUS_SUCCESS) throw Error("device " + description_ + ": " + what + ": " + lib.status(s));
  }

  friend class CudaRows;
  int index_;
  bool whole_passes_;  // the norm weights and embedding are here too: rows() works
  std::string description_, numerics_;
  std::unordered_map<const void*, DeviceBuffer> held_;  // host data -> device copy
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CallContext>> free_;
  PromptGemm prompt_;  // after free_: the plans go first (their descriptors need no handle)
};

/// A pass's rows on the device: a leased context's stream and buffers, every step
/// queued on that stream; sync() and download() wait for it.
class CudaRows final : public DeviceRows {
 public:
  explicit CudaRows(CudaLinear& owner) : owner_(owner), lease_(owner) { owner_.start(*lease_); }
  CudaRows(const CudaRows&) = delete;
  CudaRows& operator=(const CudaRows&) = delete;
  // A pass that threw may leave work queued: it finishes (its failure reported
  // nowhere) before the context serves another caller.
  ~CudaRows() override {
    if (cudaSetDevice(owner_.index_) == cudaSuccess) (void)cudaStreamSynchronize(lease_->stream);
    (void)cudaGetLastError();
  }

  void reserve(Buf b, size_t n) override {
    DeviceBuffer& buf = lease_->act[b];
    const size_t bytes = std::max<size_t>(1, n) * sizeof(float);
    if (bytes <= buf.bytes()) return;
    sync();  // growing frees the old buffer, which queued work may still read
    owner_.check(buf.reserve(bytes), "allocating activations");
  }
  float* at(Buf b) override { return static_cast<float*>(lease_->act[b].get()); }

  void embed(std::span<const int32_t> tokens, const Weight& table, size_t row0) override {
    const size_t M = tokens.size(), D = table.cols;
    CallContext& c = *lease_;
    std::vector<int32_t> ids(tokens.begin(), tokens.end());
    // Rows of the table from row0 (a shard's vocabulary): others give zeros, as an
    // id outside the table does in the kernel.
    for (int32_t& t : ids) t = size_t(t) < row0 ? -1 : int32_t(size_t(t) - row0);
    owner_.check(c.ids.reserve(M * sizeof(int32_t)), "allocating token ids");
    owner_.check(cudaMemcpyAsync(c.ids.get(), ids.data(), M * sizeof(int32_t), cudaMemcpyHostToDevice,
                                 stream()),
                 "copying token ids");
    owner_.check(cuda::launch_embedding(static_cast<const int32_t*>(c.ids.get()), M,
                                        owner_.find(table, "embedding table"), table.dtype, table.rows,
                                        D, at(x), nullptr, stream()),
                 "embedding");
  }

  void rms_norm(Buf in, size_t rows, size_t dim, const Weight& w, float eps, Buf out) override {
    owner_.check(cuda::launch_rms_norm(at(in), rows, dim, owner_.find(w, "norm weight"), w.dtype, eps,
                                       at(out), stream()),
                 "rms_norm");
  }

  void linear(Buf in, size_t M, const Weight& w, const Weight& bias, Buf out, bool prompt) override {
    (void)stream();
    owner_.product(*lease_, at(in), M, w, bias, at(out), prompt);
  }

  void rope(Buf b, size_t M, size_t heads, size_t head_dim, std::span<const int32_t> positions,
            std::span<const float> inv_freq) override {
    CallContext& c = *lease_;
    if (!std::equal(inv_freq.begin(), inv_freq.end(), c.inv_freq_host.begin(), c.inv_freq_host.end())) {
      owner_.check(c.inv_freq.reserve(inv_freq.size() * sizeof(float)), "allocating RoPE frequencies");
      owner_.check(cudaMemcpyAsync(c.inv_freq.get(), inv_freq.data(), inv_freq.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, stream()),
                   "copying RoPE frequencies");
      c.inv_freq_host.assign(inv_freq.begin(), inv_freq.end());
    }
    // The positions go up with every call (M integers): queued after the work that
    // read the last ones, so the buffer is not grown under it (reserve only grows).
    if (c.positions.bytes() < M * sizeof(int32_t)) sync();
    owner_.check(c.positions.reserve(M * sizeof(int32_t)), "allocating positions");
    owner_.check(cudaMemcpyAsync(c.positions.get(), positions.data(), M * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream()),
                 "copying positions");
    owner_.check(cuda::launch_rope(at(b), M, heads, head_dim, static_cast<const int32_t*>(c.positions.get()),
                                   static_cast<const float*>(c.inv_freq.get()), stream()),
                 "rope");
  }

  void swiglu(size_t n) override {
    owner_.check(cuda::launch_swiglu(at(gate), at(up), at(gate), n, stream()), "swiglu");
  }

  void add(Buf into, Buf from, size_t n) override {
    owner_.check(cuda::launch_add_inplace(at(into), at(from), n, stream()), "residual add");
  }

  // Runs of consecutive rows move in one copy each (a pass's rows that want logits
  // are usually all of them).
  void gather(Buf from, std::span<const size_t> rows, size_t width, Buf to) override {
    for_runs(rows, [&](size_t i, size_t n) {
      copy(at(to) + i * width, at(from) + rows[i] * width, n * width, "gathering rows");
    });
  }

  void scatter(Buf from, std::span<const size_t> rows, size_t width, Buf to) override {
    for_runs(rows, [&](size_t i, size_t n) {
      copy(at(to) + rows[i] * width, at(from) + i * width, n * width, "scattering rows");
    });
  }

  void download(Buf b, size_t offset, size_t n, float* host) override {
    owner_.check(cudaMemcpyAsync(host, at(b) + offset, n * sizeof(float), cudaMemcpyDeviceToHost,
                                 stream()),
                 "copying rows to the host");
    sync();
  }

  void upload(const float* host, size_t n, Buf b, size_t offset) override {
    // From pageable memory the call returns once `host` has been read.
    owner_.check(cudaMemcpyAsync(at(b) + offset, host, n * sizeof(float), cudaMemcpyHostToDevice,
                                 stream()),
                 "copying rows to the device");
  }

  void sync() override { owner_.check(cudaStreamSynchronize(stream()), "the pass's stream"); }

 private:
  /// The pass's stream, the calling thread's device set first (it is the thread's:
  /// whatever ran between two steps may have changed it).
  cudaStream_t stream() {
    owner_.check(cudaSetDevice(owner_.index_), "cudaSetDevice");
    return lease_->stream;
  }

  /// fn(i, n) for each run rows[i .. i + n) of consecutive values.
  template <class Fn>
  static void for_runs(std::span<const size_t> rows, Fn&& fn) {
    for (size_t i = 0; i < rows.size();) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      fn(i, j - i);
      i = j;
    }
  }

  void copy(float* to, const float* from, size_t n, const char* what) {
    owner_.check(cudaMemcpyAsync(to, from, n * sizeof(float), cudaMemcpyDeviceToDevice, stream()), what);
  }

  CudaLinear& owner_;
  CudaLinear::Lease lease_;
};

std::unique_ptr<DeviceRows> CudaLinear::rows() {
  if (!whole_passes_) return nullptr;
  return std::make_unique<CudaRows>(*this);
}

}  // namespace

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                std::span<const Weight> biases,
                                                std::span<const Weight> vectors, int index) {
  return std::make_shared<CudaLinear>(matrices, biases, vectors, index);
}

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                std::span<const Weight> biases, int index) {
  return make_cuda_linear(matrices, biases, {}, index);
}

}  // namespace vc

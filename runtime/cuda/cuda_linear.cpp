// The CUDA LinearBackend: weights in device memory, each product one launch of the
// batch-invariant matmul kernel (kernels/cuda/matmul.cuh) on a stream of the calling
// thread's own context; rows go up and results come back with every call. A
// prompt's rows go through cuBLASLt instead (prompt_gemm.hpp), in tiles of
// kPromptTileRows rows rounded to bf16.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/matmul.cuh"
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
/// a cuBLASLt handle, a tile of bf16 rows and the GEMM's workspace.
struct CallContext {
  cudaStream_t stream = nullptr;
  DeviceBuffer x, y;
  cublasLtHandle_t lt = nullptr;  // made only once cuBLASLt is loaded
  DeviceBuffer x_bf16, workspace;
  ~CallContext() {
    if (lt != nullptr) cuda_backend::cublaslt(nullptr)->destroy(lt);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class CudaLinear final : public LinearBackend {
 public:
  CudaLinear(std::span<const Weight> mats, std::span<const Weight> biases, int index) : index_(index) {
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
                (lib != nullptr ? "cuBLASLt " + std::to_string(lib->version()) : std::string("matmul kernel"));

    size_t total = 0;
    for (const Weight& m : mats) total += m.rows * m.cols * dtype_size(m.dtype);
    for (const Weight& m : mats) {
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
    for (const auto& c : free_)  // callers' buffers not in use
      bytes += c->x.bytes() + c->y.bytes() + c->x_bf16.bytes() + c->workspace.bytes();
    return bytes;
  }

  void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (M == 0) return;
    const void* dw = find(w, "weight");
    const float* db = bias.present() ? static_cast<const float*>(find(bias, "bias")) : nullptr;
    Lease ctx(*this);
    // The current device is the calling thread's: set it for every call.
    check(cudaSetDevice(index_), "cudaSetDevice");
    if (ctx->stream == nullptr)
      check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t xb = M * w.cols * sizeof(float), yb = M * w.rows * sizeof(float);
    check(ctx->x.reserve(xb), "allocating rows");
    check(ctx->y.reserve(yb), "allocating results");
    float* dx = static_cast<float*>(ctx->x.get());
    float* dy = static_cast<float*>(ctx->y.get());
    check(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, ctx->stream), "copying rows");
    check(cuda::launch_matmul(dx, M, w.cols, dw, w.dtype, w.rows, db, dy, ctx->stream), "matmul");
    check(cudaMemcpyAsync(y, dy, yb, cudaMemcpyDeviceToHost, ctx->stream), "copying results");
    check(cudaStreamSynchronize(ctx->stream), "the matmul's stream");
  }

  // Prompt rows: cuBLASLt (prompt_gemm.hpp) when the library loads and the matrix is
  // bf16; the matmul kernel otherwise, for every call of the process, so that a
  // prompt row's bits stay one.
  void linear_prompt(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    if (M == 0) return;
    // Only bf16 matrices go to cuBLASLt; the others' prompt rows take the kernel
    // (every time: the choice is per matrix, so a prompt row's bits stay one).
    const cuda_backend::CublasLt* lib = cuda_backend::cublaslt(nullptr);
    if (w.dtype != DType::bf16 || lib == nullptr) return linear(x, M, w, bias, y);
    const void* dw = find(w, "weight");
    const float* db = bias.present() ? static_cast<const float*>(find(bias, "bias")) : nullptr;
    const size_t K = w.cols, N = w.rows, T = kPromptTileRows;
    const PromptPlan* plan = nullptr;
    {
      Lease ctx(*this);
      check(cudaSetDevice(index_), "cudaSetDevice");
      if (ctx->stream == nullptr)
        check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate");
      if (ctx->lt == nullptr) check_lt(*lib, lib->create(&ctx->lt), "cublasLtCreate");
      plan = &prompt_.plan(*lib, ctx->lt, dw, N, K, db, description_);
      if (plan->usable) {
        check(ctx->x.reserve(T * K * sizeof(float)), "allocating rows");
        check(ctx->x_bf16.reserve(T * K * sizeof(uint16_t)), "allocating bf16 rows");
        check(ctx->y.reserve(T * N * sizeof(float)), "allocating results");
        check(ctx->workspace.reserve(kPromptWorkspaceBytes), "allocating cuBLASLt's workspace");
        float* dx = static_cast<float*>(ctx->x.get());
        auto* xb = static_cast<uint16_t*>(ctx->x_bf16.get());
        float* dy = static_cast<float*>(ctx->y.get());
        for (size_t r = 0; r < M; r += T) {
          // Every call has T rows: the last tile's are padded with zeros. Rows go up
          // a tile at a time (a long prompt's chunk in f32 could take gigabytes).
          const size_t m = std::min(T, M - r);
          check(cudaMemcpyAsync(dx, x + r * K, m * K * sizeof(float), cudaMemcpyHostToDevice, ctx->stream),
                "copying rows");
          check(cuda::launch_to_bf16(dx, m * K, xb, ctx->stream), "rounding rows to bf16");
          if (m < T)
            check(cudaMemsetAsync(xb + m * K, 0, (T - m) * K * sizeof(uint16_t), ctx->stream), "padding rows");
          check_lt(*lib, PromptGemm::run(ctx->lt, *plan, dw, xb, dy, ctx->workspace.get(), ctx->stream), "cublasLtMatmul");
          check(cudaMemcpyAsync(y + r * N, dy, m * N * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream),
                "copying results");
        }
        check(cudaStreamSynchronize(ctx->stream), "the prompt GEMM's stream");
        return;
      }
    }
    linear(x, M, w, bias, y);  // no algorithm without a reduction for this matrix
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

   private:
    CudaLinear& owner_;
    std::unique_ptr<CallContext> ctx_;
  };

  void check(cudaError_t e, const char* what) const {
    if (e != cudaSuccess)
      throw Error("device " + (description_.empty() ? "cuda:" + std::to_string(index_) : description_) +
                  ": " + what + ": " + cuda_error(e));
  }

  void check_lt(const cuda_backend::CublasLt& lib, cublasStatus_t s, const char* what) const {
    if (s != CUBLAS_STATUS_SUCCESS) throw Error("device " + description_ + ": " + what + ": " + lib.status(s));
  }

  const void* find(const Weight& w, const char* what) const {
    const auto it = held_.find(w.data);
    if (it == held_.end())
      throw Error("device " + description_ + ": a " + what + " of " + std::to_string(w.rows) + "x" +
                  std::to_string(w.cols) + " that was not placed on it");
    return it->second.get();
  }

  int index_;
  std::string description_, numerics_;
  std::unordered_map<const void*, DeviceBuffer> held_;  // host data -> device copy
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CallContext>> free_;
  PromptGemm prompt_;  // after free_: the plans go first (their descriptors need no handle)
};

}  // namespace

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                std::span<const Weight> biases, int index) {
  return std::make_shared<CudaLinear>(matrices, biases, index);
}

}  // namespace vc

// The CUDA LinearBackend: weights in device memory, each product one launch of the
// batch-invariant matmul kernel (kernels/cuda/matmul.cuh) on a stream of the calling
// thread's own context; rows go up and results come back with every call.
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/matmul.cuh"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/cuda/device_buffer.hpp"
#include "runtime/linear_backend.hpp"

namespace vc {
namespace {

using cuda_backend::cuda_error;
using cuda_backend::DeviceBuffer;
using cuda_backend::require_device;

/// One caller's stream and buffers for rows in and results out.
struct CallContext {
  cudaStream_t stream = nullptr;
  DeviceBuffer x, y;
  ~CallContext() {
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

  [[nodiscard]] size_t device_bytes() const override {
    size_t bytes = 0;
    for (const auto& [host, d] : held_) bytes += d.bytes();
    std::lock_guard lock(mu_);
    for (const auto& c : free_) bytes += c->x.bytes() + c->y.bytes();  // callers' buffers not in use
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

  const void* find(const Weight& w, const char* what) const {
    const auto it = held_.find(w.data);
    if (it == held_.end())
      throw Error("device " + description_ + ": a " + what + " of " + std::to_string(w.rows) + "x" +
                  std::to_string(w.cols) + " that was not placed on it");
    return it->second.get();
  }

  int index_;
  std::string description_;
  std::unordered_map<const void*, DeviceBuffer> held_;  // host data -> device copy
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CallContext>> free_;
};

}  // namespace

std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                std::span<const Weight> biases, int index) {
  return std::make_shared<CudaLinear>(matrices, biases, index);
}

}  // namespace vc

// What the CUDA backends (cuda_linear.cpp, cuda_attention.cpp) share: the check that
// a device index names a usable device, device memory that grows on demand and is
// freed with its owner, and CUDA errors in words.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "kernels/error.hpp"

namespace vc::cuda_backend {

/// `e` in words. Every failure the backends handle (and throw for) is named here,
/// so this also clears the calling thread's last-error slot: a handled failure
/// (an allocation too big for one request) must not come back as the error of the
/// thread's next kernel launch, whose launcher returns cudaGetLastError().
inline std::string cuda_error(cudaError_t e) {
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Throws vc::Error naming `cuda:index` when this machine has no such usable device.
inline void require_device(int index) {
  const std::string dev = "device cuda:" + std::to_string(index);
  int count = 0;  // left unwritten by some failures
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) throw Error(dev + ": no usable CUDA device (" + cuda_error(e) + ")");
  if (index < 0 || index >= count)
    throw Error(dev + ": this machine has " + std::to_string(count) + " CUDA device(s)");
}

/// True for an address in device memory (a model's rows kept on the device), false
/// for host memory, pageable or pinned.
inline bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // older runtimes fail for pageable memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/// Device memory that only grows, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_ != nullptr) cudaFree(p_);
      p_ = o.p_, bytes_ = o.bytes_;
      o.p_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  [[nodiscard]] void* get() const { return p_; }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  /// At least `bytes` (contents not kept); returns the error of the allocation.
  /// Growing waits for the device first: work queued on any stream may still read
  /// the old buffer (cudaFree's implicit synchronisation is not relied on).
  cudaError_t reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (p_ != nullptr) {
      if (const cudaError_t s = cudaDeviceSynchronize(); s != cudaSuccess) return s;
      cudaFree(p_);
    }
    p_ = nullptr, bytes_ = 0;
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e == cudaSuccess) bytes_ = bytes;
    return e;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace vc::cuda_backend

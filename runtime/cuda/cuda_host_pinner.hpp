// The CUDA backend's host pinner (kvtiers/host_pinning.hpp): the host memory the
// tiers offer (the host tier's chunks, which verify passes borrow in place, and the
// staging buffers of the rest) is registered with cudaHostRegister, so verify
// chunks go up by DMA.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <unordered_set>

#include "kvtiers/host_pinning.hpp"

namespace vc::cuda_backend {

/// Pins host buffers the tiers offer (kvtiers/host_pinning.hpp) with
/// cudaHostRegister, for every device (portable); a refusal leaves them pageable.
class CudaHostPinner final : public HostPinner {
 public:
  void pin(void* p, size_t bytes) noexcept override {
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // pageable, as before
      return;
    }
    try {
      std::lock_guard lock(mu_);
      pinned_.insert(p);
    } catch (...) {
      cudaHostUnregister(p);
    }
  }
  void unpin(void* p) noexcept override {
    bool had = false;
    {
      std::lock_guard lock(mu_);
      had = pinned_.erase(p) > 0;
    }
    if (had) (void)cudaHostUnregister(p);
  }

 private:
  std::mutex mu_;
  std::unordered_set<void*> pinned_;
};


}  // namespace vc::cuda_backend

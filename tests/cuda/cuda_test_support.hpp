// Helpers of the CUDA kernel tests: skip without a device, device buffers, random
// inputs, bitwise comparison. The tests compare each kernel with its CPU twin (the
// reference) and check batch invariance bit for bit.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/dtype.hpp"

namespace vc::cuda::test {

/// Skips the test when there is no CUDA device to run on (a machine with nvcc but no
/// driver reports cudaErrorInsufficientDriver and leaves the count unwritten).
#define VC_REQUIRE_CUDA_DEVICE()                                                                  \
  do {                                                                                            \
    int vc_count_ = 0;                                                                            \
    const cudaError_t vc_err_ = cudaGetDeviceCount(&vc_count_);                                   \
    if (vc_err_ != cudaSuccess || vc_count_ == 0) {                                               \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned " << cudaGetErrorName(vc_err_) \
                   << " (" << cudaGetErrorString(vc_err_) << "), count " << vc_count_;            \
    }                                                                                             \
  } while (0)

/// Device array of n elements of T, freed on scope exit.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), (n ? n : 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] T* get() const { return p_; }
  [[nodiscard]] size_t size() const { return n_; }
  void upload(const std::vector<T>& v) {
    CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> v(n_);
    CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// n random values in [lo, hi) stored as `t` (raw bytes, as weights and KV are held).
inline std::vector<uint8_t> random_typed(std::mt19937& rng, size_t n, DType t, float lo, float hi) {
  const std::vector<float> f = random_floats(rng, n, lo, hi);
  std::vector<uint8_t> raw(n * dtype_size(t));
  from_f32(t, f.data(), raw.data(), n);
  return raw;
}

/// True when a and b hold the same bits (so -0 != +0 and NaN == the same NaN).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace vc::cuda::test

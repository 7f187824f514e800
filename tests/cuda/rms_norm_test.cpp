// Tests of the CUDA RMSNorm kernel against vc::cpu::rms_norm. Skipped (with the
// CUDA error) where no device is usable, e.g. a machine with nvcc but no driver.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/rms_norm.cuh"

namespace vc::cuda {
namespace {

// Skips the test when there is no CUDA device to run on.
#define VC_REQUIRE_CUDA_DEVICE()                                                        \
  do {                                                                                  \
    int count = 0;                                                                      \
    const cudaError_t err = cudaGetDeviceCount(&count);                                 \
    if (err != cudaSuccess || count == 0) {                                             \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount returned "                    \
                   << cudaGetErrorString(err);                                          \
    }                                                                                   \
  } while (0)

/// Device buffer of floats, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), (n ? n : 1) * sizeof(float)));
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return p_; }
  void upload(const std::vector<float>& v) {
    CUDA_CHECK(cudaMemcpy(p_, v.data(), n_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::vector<float> download() const {
    std::vector<float> v(n_);
    CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(cuda_rms_norm, matches_the_cpu_rms_norm_for_many_row_sizes) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(31);
  for (size_t dim : {1u, 31u, 64u, 257u, 1024u, 1500u, 4096u}) {
    for (size_t M : {1u, 3u, 17u}) {
      const auto x = random_floats(rng, M * dim, -4.f, 4.f);
      const auto w = random_floats(rng, dim, 0.5f, 1.5f);
      const float eps = 1e-5f;
      std::vector<float> ref(M * dim);
      cpu::rms_norm(x.data(), M, dim, w.data(), DType::f32, eps, ref.data());

      DeviceBuffer dx(M * dim), dw(dim), dy(M * dim);
      dx.upload(x);
      dw.upload(w);
      CUDA_CHECK(launch_rms_norm(dx.get(), M, dim, dw.get(), eps, dy.get(), nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto y = dy.download();
      for (size_t i = 0; i < M * dim; ++i) {
        ASSERT_NEAR(y[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i])) << "dim=" << dim << " i=" << i;
      }
    }
  }
}

TEST(cuda_rms_norm, works_in_place_and_accepts_empty_input) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(32);
  const size_t M = 5, dim = 300;
  const auto x = random_floats(rng, M * dim, -1.f, 1.f);
  const auto w = random_floats(rng, dim, -1.f, 1.f);
  std::vector<float> ref(M * dim);
  cpu::rms_norm(x.data(), M, dim, w.data(), DType::f32, 1e-6f, ref.data());
  DeviceBuffer dx(M * dim), dw(dim);
  dx.upload(x);
  dw.upload(w);
  CUDA_CHECK(launch_rms_norm(dx.get(), M, dim, dw.get(), 1e-6f, dx.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = dx.download();
  for (size_t i = 0; i < M * dim; ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i]));
  EXPECT_EQ(launch_rms_norm(nullptr, 0, dim, nullptr, 1e-6f, nullptr, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace vc::cuda

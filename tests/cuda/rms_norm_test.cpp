// Tests of the CUDA RMSNorm kernel against vc::cpu::rms_norm. Skipped (with the
// CUDA error) where no device is usable, e.g. a machine with nvcc but no driver.
#include "kernels/cuda/rms_norm.cuh"

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;
using test::random_floats;

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

      DeviceBuffer<float> dx(M * dim), dw(dim), dy(M * dim);
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
  DeviceBuffer<float> dx(M * dim), dw(dim);
  dx.upload(x);
  dw.upload(w);
  CUDA_CHECK(launch_rms_norm(dx.get(), M, dim, dw.get(), 1e-6f, dx.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = dx.download();
  for (size_t i = 0; i < M * dim; ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i]));
  EXPECT_EQ(launch_rms_norm(nullptr, 0, dim, nullptr, 1e-6f, nullptr, nullptr), cudaSuccess);
}

TEST(cuda_rms_norm, takes_weights_stored_as_bf16_or_f16_like_the_cpu) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(33);
  const size_t M = 7, dim = 128;  // Qwen3's q/k norm: rows of head_dim
  for (DType wt : {DType::bf16, DType::f16}) {
    const auto x = random_floats(rng, M * dim, -3.f, 3.f);
    const auto w = test::random_typed(rng, dim, wt, 0.5f, 1.5f);
    std::vector<float> ref(M * dim);
    cpu::rms_norm(x.data(), M, dim, w.data(), wt, 1e-6f, ref.data());
    DeviceBuffer<float> dx(x), dy(M * dim);
    DeviceBuffer<uint8_t> dw(w);
    CUDA_CHECK(launch_rms_norm(dx.get(), M, dim, dw.get(), wt, 1e-6f, dy.get(), nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto y = dy.download();
    for (size_t i = 0; i < M * dim; ++i)
      ASSERT_NEAR(y[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i])) << dtype_name(wt) << " i=" << i;
  }
}

}  // namespace
}  // namespace vc::cuda

// Tests of the CUDA f32 -> bf16 rounding against vc::f32_to_bf16 (round to nearest
// even: the same bits, NaN aside, which stays NaN). Skipped where no CUDA device is
// usable.
#include "kernels/cuda/to_bf16.cuh"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dtype.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(cuda_to_bf16, rounds_as_the_cpu_does_bit_for_bit_ties_subnormals_and_overflow_included) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(61);
  std::vector<float> x = test::random_floats(rng, 100003, -1e4f, 1e4f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {  // every exponent, subnormals included
    const float f = from_bits(bits(rng));
    if (!std::isnan(f)) x.push_back(f);
  }
  for (const uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00008000u, 0x80018000u,
                           0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0u, 0x80000000u})
    x.push_back(from_bits(u));  // ties to even, subnormal ties, overflow to inf, inf, zeros
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint16_t> dout(x.size());
  CUDA_CHECK(launch_to_bf16(dx.get(), x.size(), dout.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = dout.download();
  for (size_t i = 0; i + 1 < x.size(); ++i)
    ASSERT_EQ(got[i], f32_to_bf16(x[i])) << "x=" << x[i] << " at " << i;
  EXPECT_TRUE(std::isnan(bf16_to_f32(got.back()))) << "NaN stays NaN";
  EXPECT_EQ(launch_to_bf16(nullptr, 0, nullptr, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace vc::cuda

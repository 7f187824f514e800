// Tests of the CUDA residual add against vc::cpu::add_inplace (one f32 addition per
// element: the same bits). Skipped where no CUDA device is usable.
#include "kernels/cuda/add_inplace.cuh"

#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

TEST(cuda_add_inplace, equals_the_cpu_bit_for_bit_at_every_length_and_alignment) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(51);
  for (size_t n : {1u, 3u, 4u, 5u, 17u, 1000u, 4096u, 100003u}) {
    for (size_t offset : {0u, 1u, 2u, 3u}) {  // offsets break 16-byte alignment
      const auto y0 = test::random_floats(rng, n + offset, -10.f, 10.f);
      const auto x = test::random_floats(rng, n + offset, -10.f, 10.f);
      std::vector<float> ref = y0;
      cpu::add_inplace(ref.data() + offset, x.data() + offset, n);
      DeviceBuffer<float> dy(y0), dx(x);
      CUDA_CHECK(launch_add_inplace(dy.get() + offset, dx.get() + offset, n, nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(test::same_bits(dy.download(), ref)) << "n=" << n << " offset=" << offset;
    }
  }
  EXPECT_EQ(launch_add_inplace(nullptr, nullptr, 0, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace vc::cuda

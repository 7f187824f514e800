// Tests of the CUDA SwiGLU against vc::cpu::swiglu: bit for bit against the CPU's
// scalar path (the same exp approximation, the same unfused steps), within 8 ulp of
// whichever SIMD path this CPU runs. Skipped where no CUDA device is usable.
#include "kernels/cuda/swiglu.cuh"

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/elementwise_paths.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

TEST(cuda_swiglu, equals_the_cpu_scalar_path_bit_for_bit_and_the_active_path_within_8_ulp) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(61);
  for (size_t n : {1u, 15u, 16u, 1000u, 14336u * 3u}) {
    auto gate = test::random_floats(rng, n, -20.f, 20.f);
    const auto up = test::random_floats(rng, n, -3.f, 3.f);
    gate[0] = 0.f;
    if (n > 1) gate[1] = -100.f;  // exp(-g) overflows: silu -> -0
    std::vector<float> scalar(n), active(n);
    cpu::swiglu_scalar(gate.data(), up.data(), scalar.data(), n);
    cpu::swiglu(gate.data(), up.data(), active.data(), n);

    DeviceBuffer<float> dg(gate), du(up), dout(n);
    CUDA_CHECK(launch_swiglu(dg.get(), du.get(), dout.get(), n, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto out = dout.download();
    EXPECT_TRUE(test::same_bits(out, scalar)) << "n=" << n;
    for (size_t i = 0; i < n; ++i) {
      const float a = std::fabs(active[i]);
      const float ulp = std::nextafter(a, INFINITY) - a;
      ASSERT_NEAR(out[i], active[i], 8.f * ulp) << "n=" << n << " i=" << i << " gate=" << gate[i];
    }
  }
}

TEST(cuda_swiglu, may_write_over_its_gate_input) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(62);
  const size_t n = 777;
  const auto gate = test::random_floats(rng, n, -5.f, 5.f);
  const auto up = test::random_floats(rng, n, -5.f, 5.f);
  std::vector<float> ref(n);
  cpu::swiglu_scalar(gate.data(), up.data(), ref.data(), n);
  DeviceBuffer<float> dg(gate), du(up);
  CUDA_CHECK(launch_swiglu(dg.get(), du.get(), dg.get(), n, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(test::same_bits(dg.download(), ref));
}

}  // namespace
}  // namespace vc::cuda

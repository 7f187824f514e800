// Tests of the batch-invariant CUDA matmul: against vc::cpu::matmul within f32
// rounding (the two sum K products in different orders), and bit for bit against
// itself across batch sizes -- a row computed alone equals the same row in a batch
// of 1..N rows, at any place in the batch. Skipped where no CUDA device is usable.
#include "kernels/cpu/matmul.hpp"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/matmul.cuh"
#include "tests/cuda/cuda_test_support.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

struct Case {
  size_t M, K, N;
  DType wt;
  bool bias;
  std::string str() const {
    return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
           " wt=" + std::string(dtype_name(wt)) + " bias=" + (bias ? "1" : "0");
  }
};

// |a - b| for two f32 sums of the same K products in different orders is at most
// about 2 K eps sum|x w|; in practice (random signs) far less. 1e-5 * sum|x w|
// covers K up to tens of thousands with a wide margin, and catches a wrong product.
void expect_matches_cpu(const Case& c, std::mt19937& rng) {
  const auto x = test::random_floats(rng, c.M * c.K, -1.f, 1.f);
  const auto w = test::random_typed(rng, c.N * c.K, c.wt, -1.f, 1.f);
  const auto b = test::random_floats(rng, c.N, -1.f, 1.f);
  std::vector<float> ref(c.M * c.N);
  {
    const vc::test::F32PathScope f32;  // an f32-activation reference
    cpu::matmul(x.data(), c.M, c.K, w.data(), c.wt, c.N, c.bias ? b.data() : nullptr, ref.data(),
                nullptr);
  }
  std::vector<float> wf(c.N * c.K);
  to_f32(c.wt, w.data(), wf.data(), wf.size());

  DeviceBuffer<float> dx(x), db(b), dy(c.M * c.N);
  DeviceBuffer<uint8_t> dw(w);
  CUDA_CHECK(launch_matmul(dx.get(), c.M, c.K, dw.get(), c.wt, c.N, c.bias ? db.get() : nullptr,
                           dy.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = dy.download();
  for (size_t m = 0; m < c.M; ++m) {
    for (size_t n = 0; n < c.N; ++n) {
      double mag = 0;
      for (size_t k = 0; k < c.K; ++k) mag += std::fabs(double(x[m * c.K + k]) * wf[n * c.K + k]);
      const double tol = 1e-5 * mag + 1e-6;
      ASSERT_NEAR(y[m * c.N + n], ref[m * c.N + n], tol) << c.str() << " m=" << m << " n=" << n;
    }
  }
}

TEST(cuda_matmul, matches_the_cpu_matmul_for_awkward_shapes_and_every_weight_type) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(81);
  for (DType wt : {DType::bf16, DType::f16, DType::f32}) {
    for (const Case& c :
         {Case{1, 1, 1, wt, false}, Case{1, 7, 5, wt, true}, Case{3, 8, 9, wt, false},
          Case{9, 255, 33, wt, true}, Case{17, 256, 64, wt, true}, Case{2, 1000, 130, wt, false},
          Case{5, 4096, 96, wt, true}}) {
      expect_matches_cpu(c, rng);
    }
  }
}

TEST(cuda_matmul, adds_the_qkv_bias_once_after_the_sum) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(82);
  const size_t M = 4, K = 512, N = 40;
  const auto x = test::random_floats(rng, M * K, -1.f, 1.f);
  const auto w = test::random_typed(rng, N * K, DType::bf16, -1.f, 1.f);
  const auto b = test::random_floats(rng, N, -50.f, 50.f);
  DeviceBuffer<float> dx(x), db(b), dy0(M * N), dy1(M * N);
  DeviceBuffer<uint8_t> dw(w);
  CUDA_CHECK(launch_matmul(dx.get(), M, K, dw.get(), DType::bf16, N, nullptr, dy0.get(), nullptr));
  CUDA_CHECK(launch_matmul(dx.get(), M, K, dw.get(), DType::bf16, N, db.get(), dy1.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y0 = dy0.download(), y1 = dy1.download();
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) ASSERT_EQ(y1[m * N + n], y0[m * N + n] + b[n]) << m << "," << n;
}

TEST(cuda_matmul, gives_a_row_the_same_bits_alone_and_in_batches_of_1_to_64) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(83);
  for (size_t K : {4096u, 1001u}) {  // 16-byte loads, and element loads (K % 8 != 0)
    const size_t N = 200, max_m = 64;
    const auto x = test::random_floats(rng, max_m * K, -1.f, 1.f);
    const auto w = test::random_typed(rng, N * K, DType::bf16, -1.f, 1.f);
    const auto b = test::random_floats(rng, N, -1.f, 1.f);
    DeviceBuffer<float> dx(x), db(b);
    DeviceBuffer<uint8_t> dw(w);

    std::vector<std::vector<float>> alone(max_m);
    for (size_t r = 0; r < max_m; ++r) {
      DeviceBuffer<float> drow(std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K));
      DeviceBuffer<float> dy(N);
      CUDA_CHECK(
          launch_matmul(drow.get(), 1, K, dw.get(), DType::bf16, N, db.get(), dy.get(), nullptr));
      alone[r] = dy.download();
    }
    for (size_t M = 1; M <= max_m; ++M) {
      DeviceBuffer<float> dy(M * N);
      CUDA_CHECK(
          launch_matmul(dx.get(), M, K, dw.get(), DType::bf16, N, db.get(), dy.get(), nullptr));
      const auto y = dy.download();
      for (size_t r = 0; r < M; ++r) {
        const std::vector<float> row(y.begin() + r * N, y.begin() + (r + 1) * N);
        ASSERT_TRUE(test::same_bits(row, alone[r])) << "K=" << K << " M=" << M << " row " << r;
      }
    }
    // A row at another place in the batch (another row tile, another neighbour).
    DeviceBuffer<float> dy(2 * N);
    DeviceBuffer<float> pair(std::vector<float>(x.begin() + 9 * K, x.begin() + 11 * K));
    CUDA_CHECK(
        launch_matmul(pair.get(), 2, K, dw.get(), DType::bf16, N, db.get(), dy.get(), nullptr));
    const auto y = dy.download();
    EXPECT_TRUE(test::same_bits(std::vector<float>(y.begin(), y.begin() + N), alone[9]));
    EXPECT_TRUE(test::same_bits(std::vector<float>(y.begin() + N, y.end()), alone[10]));
  }
}

TEST(cuda_matmul, does_nothing_for_no_rows_and_writes_the_bias_when_k_is_0) {
  VC_REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(launch_matmul(nullptr, 0, 16, nullptr, DType::bf16, 16, nullptr, nullptr, nullptr),
            cudaSuccess);
  // K == 0: y = bias.
  DeviceBuffer<float> db(std::vector<float>{1.f, 2.f}), dy(2);
  DeviceBuffer<float> dx(1);
  DeviceBuffer<uint8_t> dw(1);
  CUDA_CHECK(launch_matmul(dx.get(), 1, 0, dw.get(), DType::bf16, 2, db.get(), dy.get(), nullptr));
  EXPECT_EQ(dy.download(), (std::vector<float>{1.f, 2.f}));
}

}  // namespace
}  // namespace vc::cuda

// Tests of vc::cpu::matmul on every supported SIMD path: accuracy against a double
// precision reference and bit-exact batch invariance (any M, any row position, any
// thread count), for f32, f16 and bf16 weights and awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::Encoded;
using test::for_each_simd_path;
using test::kAllDTypes;
using test::random_floats;

std::vector<float> run_matmul(const std::vector<float>& x, size_t M, size_t K, const Encoded& w,
                              DType wt, size_t N, const float* bias, ThreadPool* pool) {
  std::vector<float> y(M * N, -12345.f);
  matmul(x.data(), M, K, w.bytes.data(), wt, N, bias, y.data(), pool);
  return y;
}

void expect_close_to_reference(const std::vector<float>& x, size_t M, size_t K,
                               const Encoded& w, size_t N, const std::vector<float>& bias,
                               const std::vector<float>& y) {
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      double ref = bias.empty() ? 0.0 : double(bias[n]), mag = std::fabs(ref);
      for (size_t k = 0; k < K; ++k) {
        const double p = double(x[m * K + k]) * double(w.values[n * K + k]);
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 accumulation: error bounded by a few ulp of the magnitude summed.
      const double tol = 1e-6 + 4e-7 * mag, eps = 1e-6;
      ASSERT_NEAR(y[m * N + n], ref, tol + std::fabs(ref) * eps)
          << "m=" << m << " n=" << n << " M=" << M << " K=" << K << " N=" << N;
    }
  }
}

TEST(matmul, result_matches_a_double_precision_reference_for_awkward_sizes_and_all_weight_types) {
  std::mt19937 rng(1);
  ThreadPool pool(2);
  for_each_simd_path([&](SimdPath) {
    for (DType wt : kAllDTypes) {
      for (size_t M : {1u, 3u, 8u, 17u}) {
        for (size_t K : {1u, 15u, 16u, 17u, 100u, 257u}) {
          for (size_t N : {1u, 5u, 13u, 50u}) {
            const auto x = random_floats(rng, M * K);
            const Encoded w = encode(random_floats(rng, N * K), wt);
            const auto bias = random_floats(rng, N);
            SCOPED_TRACE(std::string("weights ") + std::string(dtype_name(wt)));
            expect_close_to_reference(x, M, K, w, N, {}, run_matmul(x, M, K, w, wt, N, nullptr, nullptr));
            expect_close_to_reference(x, M, K, w, N, bias,
                                      run_matmul(x, M, K, w, wt, N, bias.data(), &pool));
          }
        }
      }
    }
  });
}

TEST(matmul, large_shapes_match_the_reference_with_threads_and_weight_packing) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  for_each_simd_path([&](SimdPath) {
    for (DType wt : kAllDTypes) {
      const size_t M = 37, K = 300, N = 230;
      const auto x = random_floats(rng, M * K);
      const Encoded w = encode(random_floats(rng, N * K), wt);
      const auto bias = random_floats(rng, N);
      expect_close_to_reference(x, M, K, w, N, bias, run_matmul(x, M, K, w, wt, N, bias.data(), &pool));
    }
  });
}

TEST(matmul, row_result_is_bit_identical_for_every_batch_size_position_and_thread_count) {
  // K = 300 is not a multiple of 8 or 16, N = 230 not a multiple of any tile width;
  // N*K is large enough that the pool splits even M = 1, and M >= 8 packs 16-bit
  // weights, so direct and packed loads are compared too.
  const size_t K = 300, N = 230;
  std::mt19937 rng(3);
  ThreadPool pool1(1), pool2(2);
  ThreadPool* pools[] = {nullptr, &pool1, &pool2};
  for_each_simd_path([&](SimdPath) {
    for (DType wt : kAllDTypes) {
      SCOPED_TRACE(std::string("weights ") + std::string(dtype_name(wt)));
      const Encoded w = encode(random_floats(rng, N * K), wt);
      const auto bias = random_floats(rng, N);
      const auto row = random_floats(rng, K);
      const auto alone = run_matmul(row, 1, K, w, wt, N, bias.data(), nullptr);
      for (ThreadPool* pool : pools) {
        for (size_t M = 1; M <= 64; ++M) {
          for (size_t pos : {size_t(0), M / 2, M - 1}) {
            auto x = random_floats(rng, M * K, -2.f, 2.f);
            std::memcpy(x.data() + pos * K, row.data(), K * sizeof(float));
            const auto y = run_matmul(x, M, K, w, wt, N, bias.data(), pool);
            ASSERT_EQ(std::memcmp(y.data() + pos * N, alone.data(), N * sizeof(float)), 0)
                << "M=" << M << " pos=" << pos
                << " threads=" << (pool ? pool->threads() : 0);
          }
        }
      }
    }
  });
}

TEST(matmul, empty_k_gives_the_bias_and_empty_m_or_n_writes_nothing) {
  for_each_simd_path([&](SimdPath) {
    const std::vector<float> bias = {1.5f, -2.f, 3.f};
    std::vector<float> y(6, 99.f);
    const float dummy = 0.f;
    matmul(&dummy, 2, 0, &dummy, DType::f32, 3, bias.data(), y.data(), nullptr);
    EXPECT_EQ(y, (std::vector<float>{1.5f, -2.f, 3.f, 1.5f, -2.f, 3.f}));
    std::vector<float> untouched(4, 7.f);
    matmul(&dummy, 0, 4, &dummy, DType::f32, 1, nullptr, untouched.data(), nullptr);
    matmul(&dummy, 1, 4, &dummy, DType::f32, 0, nullptr, untouched.data(), nullptr);
    EXPECT_EQ(untouched, std::vector<float>(4, 7.f));
  });
}

TEST(matmul, f16_subnormal_and_bf16_extreme_weights_convert_exactly) {
  // Products with exactly representable results: the sum is exact on every path.
  for_each_simd_path([&](SimdPath) {
    const size_t K = 19;
    std::vector<float> x(K, 0.f);
    x[17] = 1.f;  // lands in the K tail of every vector width
    for (DType wt : {DType::f16, DType::bf16}) {
      std::vector<float> wv(2 * K, 0.f);
      wv[17] = wt == DType::f16 ? std::ldexp(3.f, -24) : std::ldexp(1.f, -130);
      wv[K + 17] = wt == DType::f16 ? -65504.f : 3.0e38f;
      const Encoded w = encode(wv, wt);
      std::vector<float> y(2);
      matmul(x.data(), 1, K, w.bytes.data(), wt, 2, nullptr, y.data(), nullptr);
      EXPECT_EQ(y[0], w.values[17]);
      EXPECT_EQ(y[1], w.values[K + 17]);
    }
  });
}

}  // namespace
}  // namespace vc::cpu

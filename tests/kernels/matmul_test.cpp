// Tests of vc::cpu::matmul on every supported SIMD path: accuracy against a double
// precision reference and bit-exact batch invariance (any M, any row position, any
// thread count), for f32, f16 and bf16 weights and awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_paths.hpp"
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

/// True when this matmul runs on the AVX512_BF16 or AMX kernel: x rounded to bf16 first.
bool rounds_x_to_bf16(DType wt) {
  const SimdPath p = active_simd_path();
  return (p == SimdPath::avx512bf16 || p == SimdPath::amx) && wt == DType::bf16;
}

/// The operands the AVX512_BF16 and AMX kernels multiply: bf16 (nearest even),
/// subnormals 0.
float bf16_operand(float v) {
  const float r = bf16_to_f32(f32_to_bf16(v));
  return std::fpclassify(r) == FP_SUBNORMAL ? 0.f : r;
}

void expect_close_to_reference(const std::vector<float>& x, size_t M, size_t K,
                               const Encoded& w, DType wt, size_t N,
                               const std::vector<float>& bias, const std::vector<float>& y) {
  const bool bf16 = rounds_x_to_bf16(wt);
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      double ref = bias.empty() ? 0.0 : double(bias[n]), mag = std::fabs(ref);
      for (size_t k = 0; k < K; ++k) {
        const float xv = bf16 ? bf16_operand(x[m * K + k]) : x[m * K + k];
        const float wv = bf16 ? bf16_operand(w.values[n * K + k]) : w.values[n * K + k];
        const double p = double(xv) * double(wv);
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 accumulation: error bounded by a few ulp of the magnitude summed.
      // The AMX kernel keeps one accumulator per element (no partial sums), so its
      // rounding error grows with K faster than the other kernels' (bound K * 2^-24).
      const bool one_acc = bf16 && active_simd_path() == SimdPath::amx;
      const double tol = 1e-6 + (one_acc ? 2e-6 : 4e-7) * mag, eps = 1e-6;
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
            expect_close_to_reference(x, M, K, w, wt, N, {},
                                      run_matmul(x, M, K, w, wt, N, nullptr, nullptr));
            expect_close_to_reference(x, M, K, w, wt, N, bias,
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
      expect_close_to_reference(x, M, K, w, wt, N, bias,
                                run_matmul(x, M, K, w, wt, N, bias.data(), &pool));
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

TEST(matmul, row_result_is_bit_identical_when_the_columns_span_several_weight_blocks) {
  // The kernels walk the weight rows in L2-sized blocks (about 192 KiB): at K = 2000
  // a block holds 24 f32 or 48 16-bit rows, so N = 150 spans several blocks, and
  // the thread split cuts them again. Each row of x must give the bits it gives alone.
  const size_t K = 2000, N = 150;
  std::mt19937 rng(4);
  ThreadPool pool2(2);
  ThreadPool* pools[] = {nullptr, &pool2};
  for_each_simd_path([&](SimdPath) {
    for (DType wt : kAllDTypes) {
      SCOPED_TRACE(std::string("weights ") + std::string(dtype_name(wt)));
      const Encoded w = encode(random_floats(rng, N * K), wt);
      const auto row = random_floats(rng, K);
      const auto alone = run_matmul(row, 1, K, w, wt, N, nullptr, nullptr);
      for (ThreadPool* pool : pools) {
        for (size_t M : {size_t(1), size_t(3), size_t(8), size_t(13), size_t(40)}) {
          const size_t pos = M / 2;
          auto x = random_floats(rng, M * K, -2.f, 2.f);
          std::memcpy(x.data() + pos * K, row.data(), K * sizeof(float));
          const auto y = run_matmul(x, M, K, w, wt, N, nullptr, pool);
          ASSERT_EQ(std::memcmp(y.data() + pos * N, alone.data(), N * sizeof(float)), 0)
              << "M=" << M << " threads=" << (pool ? pool->threads() : 0);
          expect_close_to_reference(x, M, K, w, wt, N, {}, y);
        }
      }
    }
  });
}

TEST(matmul, weights_of_2_mib_or_more_count_as_streamed_from_memory) {
  MatmulJob j;
  j.K = 1024;
  j.wt = DType::bf16;
  j.N = 1023;
  EXPECT_FALSE(matmul_weights_streamed(j));  // 2 KiB short of 2 MiB
  j.N = 1024;
  EXPECT_TRUE(matmul_weights_streamed(j));
  j.wt = DType::f32;
  j.N = 512;
  EXPECT_TRUE(matmul_weights_streamed(j));
}

TEST(matmul, rows_keep_their_bits_on_either_side_of_the_streamed_weights_size) {
  // The tile prefetch goes to L2 for streamed weights and to L1 below: bits unchanged.
  const size_t K = 1024;
  std::mt19937 rng(5);
  ThreadPool pool2(2);
  for_each_simd_path([&](SimdPath) {
    for (DType wt : kAllDTypes) {
      for (size_t N : {size_t(1000), size_t(1030)}) {
        SCOPED_TRACE(std::string("weights ") + std::string(dtype_name(wt)) + " N=" +
                     std::to_string(N));
        const Encoded w = encode(random_floats(rng, N * K), wt);
        const auto row = random_floats(rng, K);
        const auto alone = run_matmul(row, 1, K, w, wt, N, nullptr, nullptr);
        for (size_t M : {size_t(1), size_t(6)}) {
          auto x = random_floats(rng, M * K, -2.f, 2.f);
          std::memcpy(x.data() + (M - 1) * K, row.data(), K * sizeof(float));
          const auto y = run_matmul(x, M, K, w, wt, N, nullptr, &pool2);
          ASSERT_EQ(std::memcmp(y.data() + (M - 1) * N, alone.data(), N * sizeof(float)), 0)
              << "M=" << M;
          expect_close_to_reference(x, M, K, w, wt, N, {}, y);
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
  // Products with exactly representable results: the sum is exact on every path
  // (the AVX512_BF16 and AMX kernels count a subnormal bf16 weight as 0, by the
  // instruction).
  for_each_simd_path([&](SimdPath path) {
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
      const bool flushes =
          (path == SimdPath::avx512bf16 || path == SimdPath::amx) && wt == DType::bf16;
      EXPECT_EQ(y[0], flushes ? 0.f : w.values[17]);
      EXPECT_EQ(y[1], w.values[K + 17]);
    }
  });
}

}  // namespace
}  // namespace vc::cpu

namespace vc::cpu {
namespace {

TEST(matmul, the_bf16_dot_product_paths_round_x_to_nearest_even_bf16_and_keep_f32_weights_exact) {
  test::SimdPathGuard guard;
  for (SimdPath path : {SimdPath::avx512bf16, SimdPath::amx}) {
    if (!simd_path_supported(path)) {
      std::cout << "[ SKIPPED  ] SIMD path " << simd_path_name(path)
                << ": not supported by this CPU\n";
      continue;
    }
    SCOPED_TRACE(std::string("SIMD path ") + std::string(simd_path_name(path)));
    // In bf16 (ulp 2^-7 at 1), x = 1 + 2^-8 + 2^-9 rounds up to 1 + 2^-7 and the tie
    // x = 1 + 2^-8 to the even 1:
    // with weight 1 the bf16 path gives the rounded values, f32 weights the exact ones.
    const size_t K = 2;
    const std::vector<float> x = {1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -9),
                                  1.f + std::ldexp(1.f, -8)};
    const std::vector<float> ones = {1.f, 0.f, 0.f, 1.f};
    set_simd_path(path);
    const Encoded wb = encode(ones, DType::bf16), wf = encode(ones, DType::f32);
    std::vector<float> yb(2), yf(2);
    matmul(x.data(), 1, K, wb.bytes.data(), DType::bf16, 2, nullptr, yb.data(), nullptr);
    matmul(x.data(), 1, K, wf.bytes.data(), DType::f32, 2, nullptr, yf.data(), nullptr);
    EXPECT_EQ(yb[0], 1.f + std::ldexp(1.f, -7));
    EXPECT_EQ(yb[1], 1.f);
    EXPECT_EQ(yf[0], x[0]);
    EXPECT_EQ(yf[1], x[1]);
    // f32 and f16 weights run the AVX-512 kernel: the same bits as the avx512 path.
    std::mt19937 rng(9);
    const size_t M = 11, K2 = 77, N = 29;
    const auto xs = random_floats(rng, M * K2);
    for (DType wt : {DType::f32, DType::f16}) {
      const Encoded w = encode(random_floats(rng, N * K2), wt);
      const auto a = run_matmul(xs, M, K2, w, wt, N, nullptr, nullptr);
      set_simd_path(SimdPath::avx512);
      const auto b = run_matmul(xs, M, K2, w, wt, N, nullptr, nullptr);
      set_simd_path(path);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << dtype_name(wt);
    }
  }
}

TEST(matmul, the_amx_path_matches_the_reference_at_real_model_widths_on_full_and_partial_tiles) {
  if (!simd_path_supported(SimdPath::amx)) {
    GTEST_SKIP() << "this CPU or OS cannot run AMX tiles (the amx path cannot run)";
  }
  test::SimdPathGuard guard;
  set_simd_path(SimdPath::amx);
  // K = 2048 (whole 32-wide k-tiles, weights read in place) and 1000 (a K tail);
  // N = 70 ends in a partial block of 6 weight rows; M = 1, 16, 33 cover one x tile,
  // a full one and two full tiles plus one row.
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (size_t K : {size_t(2048), size_t(1000)}) {
    const size_t N = 70;
    const Encoded w = encode(random_floats(rng, N * K), DType::bf16);
    const auto bias = random_floats(rng, N);
    for (size_t M : {size_t(1), size_t(16), size_t(33)}) {
      const auto x = random_floats(rng, M * K);
      expect_close_to_reference(x, M, K, w, DType::bf16, N, bias,
                                run_matmul(x, M, K, w, DType::bf16, N, bias.data(), &pool));
    }
  }
}

}  // namespace
}  // namespace vc::cpu

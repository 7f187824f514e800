// The CUDA LinearBackend (runtime/cuda/cuda_linear.cpp, what `--device cuda` runs the
// weight products with): host rows in, host results out, equal to the kernel's own
// result and within f32 rounding of the CPU's, batch invariant bit for bit, the same
// bits from several threads at once, and clear errors. Skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/cuda/cublaslt_library.hpp"
#include "runtime/linear_backend.hpp"
#include "tests/cuda/cuda_test_support.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc {
namespace {

struct Mat {
  std::vector<uint8_t> raw;
  Weight w;
};

Mat random_mat(std::mt19937& rng, size_t rows, size_t cols, DType t) {
  Mat m;
  m.raw = cuda::test::random_typed(rng, rows * cols, t, -1.f, 1.f);
  m.w = Weight{m.raw.data(), t, rows, cols};
  return m;
}

TEST(cuda_linear, gives_the_cpu_products_within_f32_rounding_with_and_without_bias) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(91);
  const size_t K = 600, N = 70, M = 5;
  Mat w = random_mat(rng, N, K, DType::bf16);
  Mat bias = random_mat(rng, 1, N, DType::bf16);
  const std::vector<Weight> mats{w.w}, biases{bias.w};
  const auto be = make_cuda_linear(mats, biases, 0);
  EXPECT_NE(be->description().find("cuda:0"), std::string::npos) << be->description();
  const auto x = cuda::test::random_floats(rng, M * K, -1.f, 1.f);
  std::vector<float> bf(N);
  to_f32(DType::bf16, bias.raw.data(), bf.data(), N);
  for (const bool with_bias : {false, true}) {
    std::vector<float> y(M * N), ref(M * N);
    be->linear(x.data(), M, w.w, with_bias ? bias.w : Weight{}, y.data());
    {
      const test::F32PathScope f32;
      cpu::matmul(x.data(), M, K, w.raw.data(), DType::bf16, N, with_bias ? bf.data() : nullptr,
                  ref.data(), nullptr);
    }
    std::vector<float> wf(N * K);
    to_f32(DType::bf16, w.raw.data(), wf.data(), wf.size());
    for (size_t m = 0; m < M; ++m)
      for (size_t n = 0; n < N; ++n) {
        double mag = 0;
        for (size_t k = 0; k < K; ++k) mag += std::fabs(double(x[m * K + k]) * wf[n * K + k]);
        ASSERT_NEAR(y[m * N + n], ref[m * N + n], 1e-5 * mag + 1e-6) << "m=" << m << " n=" << n;
      }
  }
}

TEST(cuda_linear, a_row_gives_the_same_bits_alone_and_in_any_batch) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(92);
  const size_t K = 256, N = 96, Mmax = 33;
  Mat w = random_mat(rng, N, K, DType::bf16);
  const std::vector<Weight> mats{w.w};
  const auto be = make_cuda_linear(mats, {}, 0);
  const auto x = cuda::test::random_floats(rng, Mmax * K, -1.f, 1.f);
  std::vector<float> all(Mmax * N);
  be->linear(x.data(), Mmax, w.w, Weight{}, all.data());
  for (size_t M : {size_t(1), size_t(2), size_t(7), size_t(16), size_t(33)}) {
    std::vector<float> y(M * N);
    be->linear(x.data(), M, w.w, Weight{}, y.data());
    EXPECT_TRUE(cuda::test::same_bits(y, std::vector<float>(all.begin(), all.begin() + long(M * N))))
        << "the first " << M << " rows differ from the same rows in a batch of " << Mmax;
  }
}

// Prompt rows (linear_prompt): cuBLASLt over the rows rounded to bf16, in tiles of
// 256 rows, with an algorithm pinned per matrix.
std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

TEST(cuda_linear, prompt_rows_give_the_product_of_their_bf16_rows_within_f32_rounding_with_and_without_bias) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(95);
  const size_t K = 640, N = 96, M = 300;  // two tiles, the second padded
  Mat w = random_mat(rng, N, K, DType::bf16);
  Mat bias = random_mat(rng, 1, N, DType::bf16);
  const std::vector<Weight> mats{w.w}, biases{bias.w};
  const auto be = make_cuda_linear(mats, biases, 0);
  ASSERT_EQ(be->description().find("[prompt rows on the matmul kernel"), std::string::npos) << be->description();
  const auto x = cuda::test::random_floats(rng, M * K, -1.f, 1.f);
  const auto xr = bf16_rounded(x);
  std::vector<float> wf(N * K), bf(N);
  to_f32(DType::bf16, w.raw.data(), wf.data(), wf.size());
  to_f32(DType::bf16, bias.raw.data(), bf.data(), N);
  for (const bool with_bias : {false, true}) {
    std::vector<float> y(M * N);
    be->linear_prompt(x.data(), M, w.w, with_bias ? bias.w : Weight{}, y.data());
    for (size_t m = 0; m < M; ++m)
      for (size_t n = 0; n < N; ++n) {
        double ref = with_bias ? bf[n] : 0.0, mag = 0;
        for (size_t k = 0; k < K; ++k) {
          ref += double(xr[m * K + k]) * wf[n * K + k];
          mag += std::fabs(double(xr[m * K + k]) * wf[n * K + k]);
        }
        ASSERT_NEAR(y[m * N + n], ref, 2e-5 * mag + 1e-6) << "m=" << m << " n=" << n << " bias " << with_bias;
      }
  }
}

TEST(cuda_linear, a_prompt_row_gives_the_same_bits_alone_anywhere_in_a_tile_and_across_tiles) {
  // What keeps a prompt's KV one whatever its chunking: a row's bits do not depend
  // on the call it is in or its place there.
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(96);
  const size_t K = 512, N = 160, Mmax = 600;
  Mat w = random_mat(rng, N, K, DType::bf16);
  Mat bias = random_mat(rng, 1, N, DType::bf16);
  const std::vector<Weight> mats{w.w}, biases{bias.w};
  const auto be = make_cuda_linear(mats, biases, 0);
  const auto x = cuda::test::random_floats(rng, Mmax * K, -2.f, 2.f);
  std::vector<float> all(Mmax * N);
  be->linear_prompt(x.data(), Mmax, w.w, bias.w, all.data());
  for (const size_t from : {size_t(0), size_t(1), size_t(37), size_t(255), size_t(256), size_t(299)})
    for (const size_t len : {size_t(1), size_t(5), size_t(200), size_t(300)}) {
      std::vector<float> y(len * N);
      be->linear_prompt(x.data() + from * K, len, w.w, bias.w, y.data());
      const auto begin = all.begin() + long(from * N);
      EXPECT_TRUE(cuda::test::same_bits(y, std::vector<float>(begin, begin + long(len * N))))
          << len << " rows from row " << from << " differ from the same rows in a call of " << Mmax;
    }
}

TEST(cuda_linear, prompt_rows_of_a_matrix_not_in_bf16_take_the_kernel_as_every_other_row_does) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(97);
  const size_t K = 256, N = 64, M = 40;
  Mat w = random_mat(rng, N, K, DType::f32);
  const std::vector<Weight> mats{w.w};
  const auto be = make_cuda_linear(mats, {}, 0);
  const auto x = cuda::test::random_floats(rng, M * K, -1.f, 1.f);
  std::vector<float> a(M * N), b(M * N);
  be->linear(x.data(), M, w.w, Weight{}, a.data());
  be->linear_prompt(x.data(), M, w.w, Weight{}, b.data());
  EXPECT_TRUE(cuda::test::same_bits(a, b));
}

TEST(cuda_linear, cublaslt_is_opened_when_first_asked_for_or_the_reason_is_given) {
  // No device needed: the library is only loaded (the toolkit's, here).
  std::string why;
  const cuda_backend::CublasLt* lib = cuda_backend::cublaslt(&why);
  if (lib == nullptr) {
    EXPECT_NE(why.find("libcublasLt.so"), std::string::npos) << why;
    return;
  }
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_NE(lib->status(CUBLAS_STATUS_NOT_SUPPORTED).find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << lib->status(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(lib, cuda_backend::cublaslt(nullptr)) << "loaded once";
}

TEST(cuda_linear, threads_calling_at_once_get_the_bits_of_calls_one_by_one) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(93);
  const size_t K = 512, N = 128, M = 4;
  Mat w = random_mat(rng, N, K, DType::bf16);
  const std::vector<Weight> mats{w.w};
  const auto be = make_cuda_linear(mats, {}, 0);
  std::vector<std::vector<float>> xs, want;
  for (int t = 0; t < 4; ++t) {
    xs.push_back(cuda::test::random_floats(rng, M * K, -1.f, 1.f));
    want.emplace_back(M * N);
    be->linear(xs.back().data(), M, w.w, Weight{}, want.back().data());
  }
  std::vector<std::vector<float>> got(4, std::vector<float>(M * N));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep) be->linear(xs[t].data(), M, w.w, Weight{}, got[t].data());
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(cuda::test::same_bits(want[t], got[t])) << "thread " << t;
}

TEST(cuda_linear, a_weight_it_was_not_given_is_an_error_naming_the_device) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(94);
  Mat w = random_mat(rng, 8, 16, DType::bf16), other = random_mat(rng, 8, 16, DType::bf16);
  const std::vector<Weight> mats{w.w};
  const auto be = make_cuda_linear(mats, {}, 0);
  std::vector<float> x(16, 1.f), y(8);
  try {
    be->linear(x.data(), 1, other.w, Weight{}, y.data());
    ADD_FAILURE() << "an unknown weight was multiplied";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not placed"), std::string::npos) << e.what();
  }
}

TEST(cuda_linear, a_device_number_past_the_machines_gpus_is_an_error) {
  VC_REQUIRE_CUDA_DEVICE();
  try {
    (void)make_cuda_linear({}, {}, 99);
    ADD_FAILURE() << "cuda:99 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc

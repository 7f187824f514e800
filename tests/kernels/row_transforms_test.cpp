// The row transforms a compressed view undoes on every draft step
// (kernels/cpu/row_transforms.hpp): the AVX-512 kernels against the scalar ones bit
// for bit, over random rows of every power-of-two length up to 256 (Hadamard) and
// even lengths with and without a vector tail (RoPE, both signs); the Hadamard
// rotation against its definition as a matrix product and as its own inverse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/row_transforms.hpp"
#include "kernels/cpu/row_transforms_paths.hpp"
#include "tests/error_naming.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what,
                      size_t d) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << ", d " << d;
}

TEST(row_transforms, hadamard_avx512_equals_the_scalar_path_bit_for_bit) {
  if (!simd_path_supported(SimdPath::avx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(3);
  for (size_t d = 1; d <= 256; d *= 2) {
    const std::vector<float> x = test::random_floats(rng, 3 * d, -4.f, 4.f);
    std::vector<float> want = x, got = x;
    hadamard_rows_scalar(want.data(), 3, d);
    hadamard_rows_avx512(got.data(), 3, d);
    expect_same_bits(want, got, "hadamard", d);
  }
}

TEST(row_transforms, hadamard_is_the_normalised_sylvester_matrix_and_its_own_inverse) {
  std::mt19937 rng(4);
  test::for_each_simd_path([&](SimdPath) {
    for (size_t d : {size_t(2), size_t(16), size_t(64)}) {
      const std::vector<float> x = test::random_floats(rng, d, -1.f, 1.f);
      std::vector<float> y = x;
      hadamard_rows(y.data(), 1, d);
      for (size_t i = 0; i < d; ++i) {
        double want = 0;  // H[i][j] = (-1)^popcount(i & j)
        for (size_t j = 0; j < d; ++j)
          want += (__builtin_popcountll(i & j) % 2 ? -1.0 : 1.0) * double(x[j]);
        EXPECT_NEAR(y[i], want / std::sqrt(double(d)), 1e-5) << "d " << d << ", i " << i;
      }
      hadamard_rows(y.data(), 1, d);
      for (size_t i = 0; i < d; ++i) EXPECT_NEAR(y[i], x[i], 1e-5) << "d " << d;
    }
  });
}

TEST(row_transforms, rope_avx512_equals_the_scalar_path_bit_for_bit) {
  if (!simd_path_supported(SimdPath::avx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> angle(-100.0, 100.0);
  for (size_t d = 2; d <= 130; d += 2) {
    const size_t h = d / 2;
    std::vector<float> cs(d);
    for (size_t i = 0; i < h; ++i) {
      const double a = angle(rng);
      cs[i] = float(std::cos(a));
      cs[h + i] = float(std::sin(a));
    }
    for (float sign : {1.f, -1.f}) {
      const std::vector<float> x = test::random_floats(rng, d, -8.f, 8.f);
      std::vector<float> want = x, got = x;
      rope_row_scalar(want.data(), d, cs.data(), sign);
      rope_row_avx512(got.data(), d, cs.data(), sign);
      expect_same_bits(want, got, sign > 0 ? "rope" : "rope undone", d);
    }
  }
}

TEST(row_transforms, rope_turns_each_pair_by_its_angle_and_back_within_float_rounding) {
  const size_t d = 64, h = d / 2, pos = 3000;
  std::vector<float> inv(h);
  for (size_t i = 0; i < h; ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(d)));
  const float* table = rope_table(inv.data(), h, pos + 5);
  const float* cs = table + pos * d;
  for (size_t i = 0; i < h; ++i) {  // the angles in double, rounded once
    const double a = double(pos) * double(inv[i]);
    ASSERT_EQ(cs[i], float(std::cos(a))) << i;
    ASSERT_EQ(cs[h + i], float(std::sin(a))) << i;
  }
  std::mt19937 rng(6);
  const std::vector<float> x = test::random_floats(rng, d, -4.f, 4.f);
  std::vector<float> y = x;
  rope_row(y.data(), d, cs, 1.f);
  for (size_t i = 0; i < h; ++i) {  // against a double rotation
    const double a = double(pos) * double(inv[i]), c = std::cos(a), s = std::sin(a);
    EXPECT_NEAR(y[i], x[i] * c - x[i + h] * s, 4e-6) << i;
    EXPECT_NEAR(y[i + h], x[i + h] * c + x[i] * s, 4e-6) << i;
  }
  rope_row(y.data(), d, cs, -1.f);
  for (size_t i = 0; i < d; ++i) EXPECT_NEAR(y[i], x[i], 4e-6) << i;
}

TEST(row_transforms, a_length_the_transform_cannot_take_is_an_error_naming_it) {
  std::vector<float> x(12);
  const float cs[12] = {};
  test::expect_error_naming([&] { hadamard_rows(x.data(), 1, 12); },
                            "hadamard_rows: length must be a power of two, got 12");
  test::expect_error_naming([&] { rope_row(x.data(), 7, cs, 1.f); },
                            "rope_row: length must be even, got 7");
}

}  // namespace
}  // namespace vc::cpu

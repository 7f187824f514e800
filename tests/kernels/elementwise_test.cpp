// Tests of rms_norm, rope, swiglu and add_inplace (kernels/cpu/elementwise.hpp)
// against double precision references, plus their bit-exactness properties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::Encoded;
using test::for_each_simd_path;
using test::kAllDTypes;
using test::random_floats;

TEST(rms_norm, matches_a_double_precision_reference_for_all_weight_types) {
  std::mt19937 rng(11);
  for (DType wt : kAllDTypes) {
    for (size_t dim : {1u, 7u, 64u, 257u}) {
      const size_t M = 5;
      const auto x = random_floats(rng, M * dim, -3.f, 3.f);
      const Encoded w = encode(random_floats(rng, dim, 0.5f, 1.5f), wt);
      std::vector<float> y(M * dim);
      const float eps = 1e-5f;
      rms_norm(x.data(), M, dim, w.bytes.data(), wt, eps, y.data());
      for (size_t m = 0; m < M; ++m) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += double(x[m * dim + i]) * x[m * dim + i];
        const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
        for (size_t i = 0; i < dim; ++i) {
          const double ref = double(x[m * dim + i]) * inv * w.values[i];
          ASSERT_NEAR(y[m * dim + i], ref, 1e-6 + 1e-6 * std::fabs(ref)) << dtype_name(wt);
        }
      }
    }
  }
}

TEST(rms_norm, row_result_does_not_depend_on_the_batch_and_in_place_is_allowed) {
  std::mt19937 rng(12);
  const size_t dim = 96, M = 9;
  const auto x = random_floats(rng, M * dim);
  const Encoded w = encode(random_floats(rng, dim), DType::bf16);
  std::vector<float> batch(M * dim);
  rms_norm(x.data(), M, dim, w.bytes.data(), DType::bf16, 1e-6f, batch.data());
  for (size_t m = 0; m < M; ++m) {
    std::vector<float> alone(x.begin() + long(m * dim), x.begin() + long((m + 1) * dim));
    rms_norm(alone.data(), 1, dim, w.bytes.data(), DType::bf16, 1e-6f, alone.data());
    ASSERT_EQ(std::memcmp(alone.data(), batch.data() + m * dim, dim * sizeof(float)), 0) << m;
  }
}

std::vector<float> llama_inv_freq(size_t head_dim, double theta) {
  std::vector<float> f(head_dim / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = float(1.0 / std::pow(theta, double(2 * i) / double(head_dim)));
  }
  return f;
}

TEST(rope, rotates_pairs_half_a_head_apart_like_the_reference) {
  std::mt19937 rng(13);
  const size_t M = 4, H = 3, D = 16;
  const auto inv = llama_inv_freq(D, 10000.0);
  const std::vector<int32_t> pos = {0, 1, 77, 16383};
  const auto x0 = random_floats(rng, M * H * D);
  auto x = x0;
  rope(x.data(), M, H, D, pos.data(), inv.data());
  for (size_t m = 0; m < M; ++m) {
    for (size_t h = 0; h < H; ++h) {
      const float* a = x0.data() + (m * H + h) * D;
      const float* b = x.data() + (m * H + h) * D;
      for (size_t i = 0; i < D / 2; ++i) {
        const double ang = double(pos[m]) * double(inv[i]);
        const double c = std::cos(ang), s = std::sin(ang);
        ASSERT_NEAR(b[i], a[i] * c - a[i + D / 2] * s, 1e-6);
        ASSERT_NEAR(b[i + D / 2], a[i + D / 2] * c + a[i] * s, 1e-6);
      }
    }
  }
  for (size_t i = 0; i < H * D; ++i) EXPECT_EQ(x[i], x0[i]);  // position 0: identity
}

TEST(rope, same_position_gives_the_same_bits_in_any_row_call_or_order) {
  std::mt19937 rng(14);
  const size_t H = 2, D = 64;
  const auto inv = llama_inv_freq(D, 500000.0);
  const auto head = random_floats(rng, H * D);
  const int32_t p = 12345;
  auto alone = head;
  rope(alone.data(), 1, H, D, &p, inv.data());
  // The same vector at the same position inside a batch of other positions, after
  // a call with different frequencies (which must not leave stale angles behind).
  const auto other_inv = llama_inv_freq(D, 10000.0);
  auto scratch = head;
  rope(scratch.data(), 1, H, D, &p, other_inv.data());
  const std::vector<int32_t> pos = {3, p, 99999, p, -5};
  std::vector<float> batch;
  for (size_t m = 0; m < pos.size(); ++m) batch.insert(batch.end(), head.begin(), head.end());
  rope(batch.data(), pos.size(), H, D, pos.data(), inv.data());
  for (size_t m : {1u, 3u}) {
    ASSERT_EQ(std::memcmp(batch.data() + m * H * D, alone.data(), H * D * sizeof(float)), 0);
  }
  EXPECT_NE(std::memcmp(scratch.data(), alone.data(), H * D * sizeof(float)), 0);
}

TEST(swiglu, matches_silu_times_up_on_every_path_including_tails_and_extremes) {
  std::mt19937 rng(15);
  for_each_simd_path([&](SimdPath) {
    for (size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 100u, 1000u}) {
      auto g = random_floats(rng, n, -20.f, 20.f);
      const auto u = random_floats(rng, n, -3.f, 3.f);
      if (n >= 8) {
        g[0] = 0.f;
        g[1] = -100.f;
        g[2] = 100.f;
        g[3] = -88.f;
        g[4] = 89.f;
        g[5] = std::numeric_limits<float>::infinity();
        g[6] = -std::numeric_limits<float>::infinity();
      }
      std::vector<float> out(n);
      swiglu(g.data(), u.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) {
        if (std::isinf(g[i])) {  // silu(+inf) = +inf; silu(-inf) = -inf / inf = NaN (as torch)
          if (g[i] > 0) {
            EXPECT_EQ(out[i], g[i] * u[i]);
          } else {
            EXPECT_TRUE(std::isnan(out[i]));
          }
          continue;
        }
        const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
        ASSERT_NEAR(out[i], ref, 1e-30 + 1e-6 * std::fabs(ref)) << "g=" << g[i] << " n=" << n;
      }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.f;
    float out = 0.f;
    swiglu(&nan, &one, &out, 1);
    EXPECT_TRUE(std::isnan(out));
  });
}

TEST(swiglu, element_result_does_not_depend_on_its_index_or_the_length) {
  std::mt19937 rng(16);
  for_each_simd_path([&](SimdPath) {
    const auto g = random_floats(rng, 41, -10.f, 10.f);
    const auto u = random_floats(rng, 41);
    std::vector<float> all(41);
    swiglu(g.data(), u.data(), all.data(), 41);
    for (size_t i = 0; i < 41; ++i) {
      float one;
      swiglu(&g[i], &u[i], &one, 1);
      ASSERT_EQ(std::memcmp(&one, &all[i], 4), 0) << i;
    }
  });
}

TEST(add_inplace, adds_the_residual) {
  std::vector<float> y = {1.f, 2.f, 3.f};
  const std::vector<float> x = {0.5f, -2.f, 1e-8f};
  add_inplace(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0.f, 3.f + 1e-8f}));
}

}  // namespace
}  // namespace vc::cpu

// Tests of the f32 <-> f16 / bf16 conversions (kernels/dtype.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dtype.hpp"

namespace vc {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST(dtype, sizes_and_names_follow_safetensors) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::f32), "F32");
  EXPECT_EQ(dtype_name(DType::f16), "F16");
  EXPECT_EQ(dtype_name(DType::bf16), "BF16");
}

TEST(dtype, every_f16_value_round_trips_through_f32_including_subnormals_and_inf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (half_is_nan(uint16_t(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(half_is_nan(f32_to_f16(f))) << std::hex << h;
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
  }
}

TEST(dtype, f16_special_values_decode_exactly) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(dtype, f32_to_f16_rounds_to_nearest_even_overflows_to_inf_and_underflows_to_zero) {
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // just below the rounding midpoint
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // midpoint rounds to even: inf
  EXPECT_EQ(f32_to_f16(1e9f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000u);          // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001u);          // above the tie
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002u);          // tie -> even (2)
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000u);         // -0
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);   // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);
  EXPECT_TRUE(half_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(dtype, f32_to_f16_picks_the_nearest_half_for_random_values) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> exp_dist(100, 143);  // subnormal..overflow
  std::uniform_int_distribution<uint32_t> mant_dist(0, 0x7fffff);
  for (int i = 0; i < 200000; ++i) {
    const float f = float_of((exp_dist(rng) << 23) | mant_dist(rng));
    const uint16_t h = f32_to_f16(f);
    if (std::fabs(f) >= 65520.0f) {
      ASSERT_EQ(h, 0x7c00u);
      continue;
    }
    const double err = std::fabs(double(f16_to_f32(h)) - double(f));
    for (int d : {-1, 1}) {
      const int nb = int(h) + d;
      if (nb < 0 || nb > 0x7bff) continue;
      const double nerr = std::fabs(double(f16_to_f32(uint16_t(nb))) - double(f));
      ASSERT_TRUE(err < nerr || (err == nerr && (h & 1u) == 0)) << f;
    }
  }
}

TEST(dtype, every_bf16_value_round_trips_and_f32_to_bf16_rounds_to_nearest_even) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82u);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -9)), 0x3f81u);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80u);  // max float rounds up to inf
  EXPECT_EQ(f32_to_bf16(float_of(0x00000001u)), 0x0000u);  // tiny subnormal -> 0
  EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002u);  // subnormal tie -> even
  // A NaN whose payload lies only in the low half must not turn into inf.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(float_of(0x7f800001u)))));
}

TEST(dtype, bulk_conversions_match_the_scalar_ones) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  std::vector<float> src(1000);
  for (auto& x : src) x = dist(rng);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<uint8_t> enc(src.size() * dtype_size(t));
    from_f32(t, src.data(), enc.data(), src.size());
    std::vector<float> back(src.size());
    to_f32(t, enc.data(), back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      uint16_t h = 0;
      if (t != DType::f32) std::memcpy(&h, enc.data() + 2 * i, 2);
      const float expect = t == DType::f32    ? src[i]
                           : t == DType::f16 ? f16_to_f32(f32_to_f16(src[i]))
                                             : bf16_to_f32(f32_to_bf16(src[i]));
      ASSERT_EQ(back[i], expect) << dtype_name(t) << " " << i;
    }
  }
}

}  // namespace
}  // namespace vc

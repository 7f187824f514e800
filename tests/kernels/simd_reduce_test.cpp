// Tests of the AVX-512 traits' sixteen-at-once reduction (kernels/cpu/simd_avx512.hpp,
// through score_sums_avx512):
// lane n of reduce16_finish(reduce16_pair(r0, r1), reduce16_pair(r2, r3)) is the
// sum reduce4 gives vector n, bit for bit, so attention scores reduced sixteen at
// a time keep the bits of scores reduced four at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/cpu_features.hpp"

namespace vc::cpu {
namespace {

TEST(simd_reduce, sixteen_sums_at_once_have_the_bits_of_reduce4) {
  if (!simd_path_supported(SimdPath::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(5);
  // Magnitudes from 2^-20 to 2^20 and both signs: the order of the additions
  // shows in the last bits of nearly every sum.
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> expo(-20, 20);
  int order_shows = 0;
  for (int trial = 0; trial < 200; ++trial) {
    float in[256], wide[16], narrow[16];
    for (float& x : in) x = std::ldexp(mant(rng), expo(rng));
    score_sums_avx512(in, wide, narrow);
    for (int n = 0; n < 16; ++n) {
      ASSERT_EQ(std::memcmp(&wide[n], &narrow[n], 4), 0)
          << "trial " << trial << " vector " << n << ": " << wide[n] << " vs " << narrow[n];
      // A plain left-to-right sum, to show these inputs tell orders apart.
      float seq = 0.f;
      for (int l = 0; l < 16; ++l) seq += in[16 * n + l];
      order_shows += std::memcmp(&seq, &narrow[n], 4) != 0;
    }
  }
  EXPECT_GT(order_shows, 1000) << "of 3200 sums, too few differ from a left-to-right sum";
}

}  // namespace
}  // namespace vc::cpu

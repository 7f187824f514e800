// dequantize_rows (kernels/cpu/dequant.hpp): the scalar path against codes read bit
// by bit, and every SIMD path against the scalar path bit for bit, over random codes
// from a seed at every width 1..16 and the column groups the quantizers use (1 column:
// KIVI's per-channel keys; a few columns: KVQuant's key spans and KIVI's keys on short
// views; 32..128 or a whole row: per-token values), with row starts and lengths that
// leave heads and tails around the vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/dequant_paths.hpp"
#include "kernels/dtype.hpp"
#include "tests/error_naming.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using DequantFn = void (*)(const uint8_t*, size_t, int, size_t, size_t, size_t, const uint16_t*,
                           const uint16_t*, size_t, size_t, float*);

struct Case {
  int bits;
  size_t first, rows, d, group_cols, params_row_stride;
  std::vector<uint8_t> codes;  // exactly the bytes the codes [0, first + rows * d) need
  std::vector<uint16_t> code_values;
  std::vector<uint16_t> zero, scale;  // fp16 bits, one per group of group_cols columns
                                      // (per row, params_row_stride apart, unless 0)
};

// Random codes packed LSB first, and per-group fp16 zeros and scales (as the packed
// tier stores them): mostly ordinary values, some subnormal, signed zero or infinite.
Case random_case(std::mt19937& rng, int bits, size_t first, size_t rows, size_t d,
                 size_t group_cols, bool per_row) {
  const size_t groups = (d + group_cols - 1) / group_cols;
  const size_t stride = per_row ? groups + (groups % 2) : 0;  // some strides with a gap
  Case c{bits, first, rows, d, group_cols, stride, {}, {}, {}, {}};
  const size_t n = first + rows * d;
  c.codes.assign((n * size_t(bits) + 7) / 8, 0);
  c.code_values.resize(n);
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1u);
  for (size_t i = 0; i < n; ++i) {
    c.code_values[i] = uint16_t(code(rng));
    for (int b = 0; b < bits; ++b) {
      const size_t at = i * size_t(bits) + size_t(b);
      if ((c.code_values[i] >> b) & 1u) c.codes[at / 8] |= uint8_t(1u << (at % 8));
    }
  }
  std::uniform_real_distribution<float> val(-4.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  auto fp16 = [&](float typical) -> uint16_t {
    switch (pick(rng)) {
      case 0: return uint16_t(0x0001u + code(rng) % 0x3ffu);  // subnormal
      case 1: return 0x8000u;                                  // -0
      case 2: return 0x7c00u;                                  // +inf
      default: return f32_to_f16(typical);
    }
  };
  for (size_t g = 0; g < (per_row ? rows * stride : groups); ++g) {
    c.zero.push_back(fp16(val(rng)));
    c.scale.push_back(fp16(std::fabs(val(rng)) / float((1u << bits) - 1u)));
  }
  return c;
}

std::vector<float> run(DequantFn fn, const Case& c) {
  std::vector<float> out(c.rows * c.d + 1, -7.0f);  // one guard element after the rows
  fn(c.codes.data(), c.codes.size(), c.bits, c.first, c.rows, c.d, c.zero.data(), c.scale.data(),
     c.group_cols, c.params_row_stride, out.data());
  return out;
}

std::string describe(const Case& c) {
  return std::to_string(c.bits) + " bits, first " + std::to_string(c.first) + ", " +
         std::to_string(c.rows) + " rows of " + std::to_string(c.d) + ", groups of " +
         std::to_string(c.group_cols) + " columns, params row stride " +
         std::to_string(c.params_row_stride);
}

// Every case the paths are compared on, from one seed.
template <class Check>
void for_each_case(Check check) {
  std::mt19937 rng(20261202);
  for (int bits = 1; bits <= 16; ++bits)
    for (size_t d : {size_t(64), size_t(128), size_t(96), size_t(24), size_t(13), size_t(7)})
      for (size_t group_cols : {1, 2, 3, 8, 16, 32, 64, 128})
        for (size_t first_row : {size_t(0), size_t(3), size_t(31)})
          for (size_t rows : {size_t(1), size_t(5), size_t(16), size_t(32)})
            for (bool per_row : {false, true}) {
              check(random_case(rng, bits, first_row * d, rows, d, group_cols, per_row));
              // A start that is not a whole row (and not a multiple of 8 codes).
              check(random_case(rng, bits, first_row * d + 5, rows, d, group_cols, per_row));
            }
}

TEST(dequantize_rows, scalar_path_gives_zero_plus_code_times_scale_for_every_width) {
  for_each_case([](const Case& c) {
    const std::vector<float> out = run(&dequantize_rows_scalar, c);
    for (size_t r = 0; r < c.rows; ++r)
      for (size_t k = 0; k < c.d; ++k) {
        const float code = float(c.code_values[c.first + r * c.d + k]);
        const size_t g = r * c.params_row_stride + k / c.group_cols;
        const float product = code * f16_to_f32(c.scale[g]);  // rounded alone, as the codecs do
        const float want = f16_to_f32(c.zero[g]) + product;
        if (std::isnan(want)) {  // 0 * inf
          ASSERT_TRUE(std::isnan(out[r * c.d + k])) << describe(c) << ", row " << r << ", column " << k;
          continue;
        }
        ASSERT_EQ(0, std::memcmp(&want, &out[r * c.d + k], sizeof(float)))
            << describe(c) << ", row " << r << ", column " << k;
      }
    ASSERT_EQ(out.back(), -7.0f) << describe(c) << ": wrote past the rows";
  });
}

void expect_path_equals_scalar(SimdPath path, DequantFn fn) {
  if (!simd_path_supported(path))
    GTEST_SKIP() << "this CPU cannot run the " << simd_path_name(path)
                 << " path (cpuid), so its dequantization kernel is compiled but not run here";
  size_t cases = 0;
  for_each_case([&](const Case& c) {
    const std::vector<float> want = run(&dequantize_rows_scalar, c), got = run(fn, c);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << simd_path_name(path) << " path differs from the scalar path: " << describe(c);
    ++cases;
  });
  EXPECT_GT(cases, size_t(0));
}

TEST(dequantize_rows, avx2_path_equals_the_scalar_path_bit_for_bit) {
  expect_path_equals_scalar(SimdPath::avx2, &dequantize_rows_avx2);
}

TEST(dequantize_rows, avx512_path_equals_the_scalar_path_bit_for_bit) {
  expect_path_equals_scalar(SimdPath::avx512, &dequantize_rows_avx512);
}

TEST(dequantize_rows, dispatch_runs_the_active_path_with_the_same_bits) {
  std::mt19937 rng(7);
  const Case c = random_case(rng, 4, 64 * 3, 16, 64, 32, true);
  const std::vector<float> want = run(&dequantize_rows_scalar, c);
  test::for_each_simd_path([&](SimdPath) {
    std::vector<float> out(want.size(), -7.0f);
    dequantize_rows(c.codes.data(), c.codes.size(), c.bits, c.first, c.rows, c.d, c.zero.data(),
                    c.scale.data(), c.group_cols, c.params_row_stride, out.data());
    ASSERT_EQ(0, std::memcmp(want.data(), out.data(), want.size() * sizeof(float)));
  });
}

TEST(f16_to_f32_n, every_fp16_value_converts_exactly_on_every_simd_path) {
  // All 65536 patterns (subnormals, infinities, NaNs: still NaN) against the scalar conversion,
  // from an odd offset with a count that leaves a tail past every vector width.
  std::vector<uint16_t> h(65536 + 3);
  for (size_t i = 0; i < 65536; ++i) h[i + 1] = uint16_t(i);
  std::vector<float> want(65536);
  for (size_t i = 0; i < 65536; ++i) want[i] = f16_to_f32(uint16_t(i));
  test::for_each_simd_path([&](SimdPath) {
    std::vector<float> out(65536 + 1, -7.0f);
    f16_to_f32_n(h.data() + 1, 65536, out.data());
    for (size_t i = 0; i < 65536; ++i) {
      if (std::isnan(want[i])) {  // a signalling NaN may come back quiet
        ASSERT_TRUE(std::isnan(out[i])) << "fp16 0x" << std::hex << i;
        continue;
      }
      uint32_t a, b;
      std::memcpy(&a, &want[i], 4);
      std::memcpy(&b, &out[i], 4);
      ASSERT_EQ(a, b) << "fp16 0x" << std::hex << i << ": " << want[i] << " vs " << out[i];
    }
    ASSERT_EQ(out[65536], -7.0f) << "wrote past n";
  });
}

TEST(dequantize_rows, bad_width_group_or_codes_past_the_buffer_are_errors_naming_them) {
  const std::vector<uint8_t> codes(8, 0);
  const std::vector<uint16_t> zs(8, 0), ss(8, 0x3c00u);
  std::vector<float> out(16);
  auto call = [&](int bits, size_t rows, size_t group_cols) {
    dequantize_rows(codes.data(), codes.size(), bits, 0, rows, 8, zs.data(), ss.data(), group_cols,
                    0, out.data());
  };
  test::expect_error_naming([&] { call(0, 1, 1); }, "bits must be in 1..16, got 0");
  test::expect_error_naming([&] { call(17, 1, 1); }, "got 17");
  test::expect_error_naming([&] { call(8, 1, 0); }, "group_cols must be at least 1");
  // 2 rows of 8 codes of 8 bits need 16 bytes; the buffer holds 8.
  test::expect_error_naming([&] { call(8, 2, 1); }, "run past the 8-byte code buffer");
}

}  // namespace
}  // namespace vc::cpu

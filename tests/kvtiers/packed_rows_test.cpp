// PackedSide::decode_rows (the drafter's block-at-a-time dequantization) against
// PackedSide::decode (the whole side at once): the same bits for every row range,
// code width, block shape and partial block, with bf16 rows and outliers mixed in,
// on every SIMD path this CPU runs (decode_rows dequantizes in cpu::dequantize_rows).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/packed_kv.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc {
namespace {

PackedSide random_side(std::mt19937& rng, size_t n, size_t q, size_t d, int bits, BlockShape shape) {
  PackedSide side;
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1u);
  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  std::vector<uint16_t> codes(q * d);
  for (auto& c : codes) c = uint16_t(code(rng));
  const size_t blocks = ((q + shape.rows - 1) / shape.rows) * ((d + shape.cols - 1) / shape.cols);
  std::vector<float> scale_zero(2 * blocks);
  for (auto& x : scale_zero) x = val(rng);
  pack_quantized(side, q, d, shape, bits, codes, scale_zero);
  std::vector<float> rest((n - q) * d);
  for (auto& x : rest) x = val(rng);
  pack_bf16(side, rest.data(), rest.size());
  for (size_t i = 3; i < n * d; i += 17 + i % 5) {  // ascending, as codecs record them
    side.outlier_index.push_back(uint32_t(i));
    side.outlier_value.push_back(f32_to_bf16(val(rng) * 10.0f));
  }
  return side;
}

TEST(packed_rows, any_row_range_decodes_to_the_same_bits_as_the_whole_side) {
  test::for_each_simd_path([](cpu::SimdPath) {
    std::mt19937 rng(5);
    const BlockShape shapes[] = {{32, 1}, {1, 32}, {1, 64}, {7, 3}, {16, 64}, {2, 8}};
    for (int bits : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16})
      for (const BlockShape shape : shapes)
        for (size_t d : {size_t(64), size_t(24), size_t(13)}) {
          const size_t n = 77, q = 61;  // a partial last block on both axes for most shapes
          const PackedSide side = random_side(rng, n, q, d, bits, shape);
          std::vector<float> whole(n * d);
          side.decode(whole.data(), n, d, nullptr, nullptr);
          for (size_t r0 : {size_t(0), size_t(1), size_t(16), size_t(31), size_t(60)})
            for (size_t len : {size_t(1), size_t(5), size_t(16), size_t(40)}) {
              const size_t r1 = std::min(n, r0 + len);
              std::vector<float> part((r1 - r0) * d, -1.0f);
              side.decode_rows(part.data(), r0, r1, n, d, nullptr, nullptr);
              ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + r0 * d, part.size() * sizeof(float)))
                  << bits << " bits, block " << shape.rows << "x" << shape.cols << ", d " << d
                  << ", rows [" << r0 << ", " << r1 << ")";
            }
        }
  });
}

}  // namespace
}  // namespace vc

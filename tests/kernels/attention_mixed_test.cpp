// Tests of vc::cpu::attention_row_mixed (the drafter's attention over a compressed
// prefix and a paged tail) on every SIMD path: accuracy against a double precision
// softmax for prefixes read in place as bf16 or fp32, of lengths around the block
// size, with and without a tail, and the GQA head mapping.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention_mixed.hpp"
#include "kernels/error.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::Encoded;
using test::for_each_simd_path;
using test::random_floats;

constexpr size_t kHeads = 4, kKvHeads = 2, kDim = 64, kBlock = 8;

struct Case {
  size_t prefix_rows;  // per KV head (the same for each here, different per case)
  size_t tail_rows;
};

// Double-precision attention of q over rows (k, v: [n, D] as floats).
std::vector<double> reference(const float* q, const std::vector<float>& k,
                              const std::vector<float>& v, size_t n, float scale) {
  std::vector<double> s(n), out(kDim, 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = 0;
    for (size_t j = 0; j < kDim; ++j) d += double(q[j]) * k[i * kDim + j];
    s[i] = d * scale;
    mx = std::max(mx, s[i]);
  }
  for (size_t i = 0; i < n; ++i) sum += s[i] = std::exp(s[i] - mx);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < kDim; ++j) out[j] += s[i] / sum * v[i * kDim + j];
  return out;
}

void check(DType prefix_dtype, const Case& c, std::mt19937& rng) {
  const float scale = 1.f / std::sqrt(float(kDim));
  // Prefix rows of each KV head, stored in prefix_dtype.
  std::vector<Encoded> pk, pv;
  std::vector<DenseKvHead> prefix;
  for (size_t g = 0; g < kKvHeads; ++g) {
    pk.push_back(encode(random_floats(rng, c.prefix_rows * kDim), prefix_dtype));
    pv.push_back(encode(random_floats(rng, c.prefix_rows * kDim), prefix_dtype));
  }
  for (size_t g = 0; g < kKvHeads; ++g)
    prefix.push_back({pk[g].bytes.data(), pv[g].bytes.data(), c.prefix_rows, prefix_dtype});
  // A paged tail at positions [tail_begin, tail_begin + tail_rows) in reversed blocks.
  const size_t tail_begin = 40, n_ctx = tail_begin + c.tail_rows;
  const size_t blocks = (n_ctx + kBlock - 1) / kBlock + 1;
  std::vector<int32_t> table(blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  const Encoded tk = encode(random_floats(rng, blocks * kKvHeads * kBlock * kDim), DType::bf16);
  const Encoded tv = encode(random_floats(rng, blocks * kKvHeads * kBlock * kDim), DType::bf16);
  PagedKv tail{tk.bytes.data(), tv.bytes.data(), DType::bf16, kBlock, kKvHeads, kDim,
               table.data()};
  const std::vector<float> q = random_floats(rng, kHeads * kDim, -2.f, 2.f);
  std::vector<float> out(kHeads * kDim, NAN);
  attention_row_mixed(q.data(), kHeads, prefix.data(), tail, tail_begin, n_ctx, scale,
                      out.data());
  for (size_t h = 0; h < kHeads; ++h) {
    const size_t g = h / (kHeads / kKvHeads);
    std::vector<float> k = pk[g].values, v = pv[g].values;
    for (size_t pos = tail_begin; pos < n_ctx; ++pos) {
      const size_t at = ((size_t(table[pos / kBlock]) * kKvHeads + g) * kBlock + pos % kBlock) * kDim;
      k.insert(k.end(), tk.values.begin() + long(at), tk.values.begin() + long(at + kDim));
      v.insert(v.end(), tv.values.begin() + long(at), tv.values.begin() + long(at + kDim));
    }
    const std::vector<double> want = reference(&q[h * kDim], k, v, c.prefix_rows + c.tail_rows, scale);
    for (size_t j = 0; j < kDim; ++j)
      ASSERT_NEAR(out[h * kDim + j], want[j], 2e-5)
          << "head " << h << " dim " << j << " prefix " << c.prefix_rows << " tail " << c.tail_rows;
  }
}

TEST(attention_mixed, matches_a_double_softmax_over_prefix_then_tail_on_every_simd_path) {
  const Case cases[] = {{0, 5}, {1, 0}, {15, 3}, {16, 0}, {16, 1}, {37, 9}, {64, 0}, {100, 17}};
  for_each_simd_path([&](SimdPath) {
    std::mt19937 rng(7);
    for (DType t : {DType::f32, DType::bf16})
      for (const Case& c : cases) {
        SCOPED_TRACE("prefix dtype " + std::string(dtype_name(t)));
        check(t, c, rng);
      }
  });
}

TEST(attention_mixed, rejects_a_prefix_in_half_precision_and_an_empty_context) {
  std::vector<float> q(kHeads * kDim, 0.f), out(kHeads * kDim);
  std::vector<uint16_t> rows(kDim, 0);
  std::vector<int32_t> table{0};
  std::vector<uint16_t> tk(kKvHeads * kBlock * kDim, 0);
  PagedKv tail{tk.data(), tk.data(), DType::bf16, kBlock, kKvHeads, kDim, table.data()};
  std::vector<DenseKvHead> f16(kKvHeads, {rows.data(), rows.data(), 1, DType::f16});
  EXPECT_THROW(attention_row_mixed(q.data(), kHeads, f16.data(), tail, 0, 0, 1.f, out.data()),
               Error);
  std::vector<DenseKvHead> empty(kKvHeads);
  EXPECT_THROW(attention_row_mixed(q.data(), kHeads, empty.data(), tail, 0, 0, 1.f, out.data()),
               Error);
}

}  // namespace
}  // namespace vc::cpu

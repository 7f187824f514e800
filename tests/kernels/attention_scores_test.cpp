// score_rows: every score is the dot product of its query row and key (checked
// against double sums), whatever the rows, columns, blocks or pool it is
// computed with (bit for bit), over bf16 and f32 paged keys with a scattered
// block table. accumulate_attention: each row's softmax summed into the keys it
// sees, on every SIMD path, the same bits with or without a pool and over split
// calls.
#include "kernels/cpu/attention_scores.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc {
namespace {

// A paged layer of `n` positions, blocks stored in reverse order.
struct Paged {
  size_t bt = 16, G = 3, D = 40, n = 0;
  DType dtype = DType::bf16;
  std::vector<uint16_t> k16;
  std::vector<float> k32;
  std::vector<int32_t> table;
  std::vector<float> exact;  // [G][n][D] the keys as fp32

  Paged(size_t positions, DType dt, std::mt19937& rng) : n(positions), dtype(dt) {
    const size_t blocks = (n + bt - 1) / bt;
    for (size_t j = 0; j < blocks; ++j) table.push_back(int32_t(blocks - 1 - j));
    const auto vals = test::random_floats(rng, blocks * G * bt * D);
    exact.assign(G * n * D, 0.f);
    k16.resize(vals.size());
    k32.resize(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      k16[i] = f32_to_bf16(vals[i]);
      k32[i] = dt == DType::bf16 ? bf16_to_f32(k16[i]) : vals[i];
    }
    for (size_t g = 0; g < G; ++g)
      for (size_t t = 0; t < n; ++t)
        for (size_t d = 0; d < D; ++d)
          exact[(g * n + t) * D + d] = k32[((size_t(table[t / bt]) * G + g) * bt + t % bt) * D + d];
  }
  [[nodiscard]] cpu::PagedKv view() const {
    const void* k = dtype == DType::bf16 ? static_cast<const void*>(k16.data()) : k32.data();
    return cpu::PagedKv{k, k, dtype, bt, G, D, table.data()};
  }
};

TEST(score_rows, every_score_is_the_dot_product_of_its_query_and_key) {
  std::mt19937 rng(5);
  for (DType dt : {DType::bf16, DType::f32}) {
    const Paged kv(203, dt, rng);
    const size_t rows = 7;
    const auto q = test::random_floats(rng, rows * kv.D);
    test::for_each_simd_path([&](cpu::SimdPath) {
      for (size_t g = 0; g < kv.G; ++g) {
        std::vector<float> s(rows * kv.n);
        cpu::score_rows(q.data(), kv.D, rows, kv.view(), g, kv.n, s.data(), nullptr);
        for (size_t i = 0; i < rows; ++i)
          for (size_t t = 0; t < kv.n; ++t) {
            double want = 0;
            for (size_t d = 0; d < kv.D; ++d)
              want += double(q[i * kv.D + d]) * double(kv.exact[(g * kv.n + t) * kv.D + d]);
            ASSERT_NEAR(s[i * kv.n + t], want, 1e-5) << i << " " << t;
          }
      }
    });
  }
}

TEST(score_rows, a_score_does_not_depend_on_the_rows_columns_or_threads_it_is_computed_with) {
  std::mt19937 rng(9);
  const Paged kv(150, DType::bf16, rng);
  const size_t rows = 9;
  const auto q = test::random_floats(rng, rows * kv.D);
  cpu::ThreadPool pool(2);
  std::vector<float> all(rows * kv.n);
  cpu::score_rows(q.data(), kv.D, rows, kv.view(), 1, kv.n, all.data(), &pool);
  for (size_t r0 : {size_t(0), size_t(3), size_t(8)})
    for (size_t cols : {size_t(1), size_t(17), size_t(150)}) {
      const size_t nr = rows - r0;
      std::vector<float> part(nr * cols);
      cpu::score_rows(q.data() + r0 * kv.D, kv.D, nr, kv.view(), 1, cols, part.data(), nullptr);
      for (size_t i = 0; i < nr; ++i)
        EXPECT_EQ(0, std::memcmp(&part[i * cols], &all[(r0 + i) * kv.n], cols * sizeof(float)))
            << "row " << r0 + i << ", " << cols << " columns";
      // Keys transposed once for all 150 positions, scored over the first
      // `cols`.
      std::vector<float> kt;
      cpu::transpose_keys(kv.view(), 1, kv.n, kt, &pool);
      std::vector<float> again(nr * cols);
      cpu::score_rows_transposed(q.data() + r0 * kv.D, kv.D, nr, kt.data(), kv.D, cols,
                                 again.data(), nullptr);
      EXPECT_EQ(0, std::memcmp(again.data(), part.data(), again.size() * sizeof(float)));
    }
}

TEST(accumulate_attention, sums_each_rows_softmax_into_the_columns_it_sees) {
  std::mt19937 rng(4);
  const Paged kv(150, DType::bf16, rng);
  const size_t rows = 11, g = 2;
  const auto q = test::random_floats(rng, rows * kv.D);
  // Causal rows ending at positions 139..149, with their exact max and sum.
  std::vector<size_t> len(rows);
  std::vector<float> row_max(rows), row_inv(rows);
  std::vector<double> want(kv.n, 0.0);
  for (size_t i = 0; i < rows; ++i) {
    len[i] = kv.n - rows + 1 + i;
    std::vector<double> s(len[i]);
    double top = -INFINITY, total = 0;
    for (size_t t = 0; t < len[i]; ++t) {
      double dot = 0;
      for (size_t d = 0; d < kv.D; ++d)
        dot += double(q[i * kv.D + d]) * double(kv.exact[(g * kv.n + t) * kv.D + d]);
      top = std::max(top, s[t] = dot);
    }
    for (size_t t = 0; t < len[i]; ++t) total += std::exp(s[t] - top);
    for (size_t t = 0; t < len[i]; ++t) want[t] += std::exp(s[t] - top) / total;
    row_max[i] = float(top);
    row_inv[i] = float(1.0 / total);
  }
  std::vector<float> kt;
  cpu::transpose_keys(kv.view(), g, kv.n, kt, nullptr);
  cpu::ThreadPool pool(2);
  test::for_each_simd_path([&](cpu::SimdPath) {
    std::vector<float> acc(kv.n, 1.0f), alone(kv.n, 1.0f);  // sums add to what is there
    cpu::accumulate_attention_transposed(q.data(), kv.D, rows, kt.data(), kv.D, kv.n, len.data(),
                                         row_max.data(), row_inv.data(), acc.data(), &pool);
    cpu::accumulate_attention_transposed(q.data(), kv.D, rows, kt.data(), kv.D, kv.n, len.data(),
                                         row_max.data(), row_inv.data(), alone.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(acc.data(), alone.data(), acc.size() * sizeof(float)))
        << "the pool changes no bits";
    for (size_t t = 0; t < kv.n; ++t)
      EXPECT_NEAR(acc[t], 1.0 + want[t], 1e-5 + 1e-4 * want[t]) << "position " << t;
    // Rows split over two calls (as prefill chunks arrive) give the same bits.
    std::vector<float> split(kv.n, 1.0f);
    for (auto [b, e] : {std::pair<size_t, size_t>{0, 5}, {5, rows}})
      cpu::accumulate_attention_transposed(q.data() + b * kv.D, kv.D, e - b, kt.data(), kv.D, kv.n,
                                           len.data() + b, row_max.data() + b, row_inv.data() + b,
                                           split.data(), &pool);
    EXPECT_EQ(0, std::memcmp(split.data(), alone.data(), split.size() * sizeof(float)));
  });
}

TEST(score_rows, a_head_outside_the_layer_or_a_missing_block_is_an_error) {
  std::mt19937 rng(1);
  Paged kv(40, DType::bf16, rng);
  std::vector<float> q(kv.D, 0.5f), s(40);
  EXPECT_THROW(cpu::score_rows(q.data(), kv.D, 1, kv.view(), 3, 40, s.data(), nullptr), Error);
  kv.table[1] = -1;
  EXPECT_THROW(cpu::score_rows(q.data(), kv.D, 1, kv.view(), 0, 40, s.data(), nullptr), Error);
}

}  // namespace
}  // namespace vc

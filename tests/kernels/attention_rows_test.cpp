// Tests of vc::cpu::AttentionRowState::add_rows: rows of one sequence whose query
// heads share passes over each KV block give, row for row, the bits of each row
// added alone (and the same softmax maxima and sums), on every SIMD path and dtype,
// for KV heads with one, two and four query heads, rows ending in the same block or
// in different ones, and blocks arriving in chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "tests/error_naming.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::for_each_simd_path;
using test::kAllDTypes;
using test::random_floats;

struct Kv {
  std::vector<unsigned char> k, v;
  std::vector<int32_t> table;
  PagedKv view;
};

// `blocks` blocks of random K and V, laid out in a shuffled order (a block table
// that jumps, as a paged cache's does).
Kv random_kv(std::mt19937& rng, DType t, size_t kv_heads, size_t D, size_t bt, size_t blocks) {
  Kv kv;
  kv.k = encode(random_floats(rng, blocks * kv_heads * bt * D), t).bytes;
  kv.v = encode(random_floats(rng, blocks * kv_heads * bt * D), t).bytes;
  kv.table.resize(blocks);
  std::iota(kv.table.begin(), kv.table.end(), 0);
  std::shuffle(kv.table.begin(), kv.table.end(), rng);
  kv.view = PagedKv{kv.k.data(), kv.v.data(), t, bt, kv_heads, D, kv.table.data()};
  return kv;
}

// Rows at positions first .. first + n - 1 (n_ctx = position + 1), their blocks
// added in chunks of `chunk`; alone (each row's add()) or together (add_rows).
struct RowsOut {
  std::vector<float> out, max_sum;
};

RowsOut attend_rows(const Kv& kv, const std::vector<float>& q, size_t n_heads, size_t first,
                    size_t n, size_t chunk, bool together) {
  const size_t D = kv.view.head_dim;
  std::vector<AttentionRowState> st(n);
  size_t blocks = 0;
  for (size_t m = 0; m < n; ++m) {
    st[m].begin(q.data() + m * n_heads * D, n_heads, kv.view, first + m + 1, 0.25f);
    blocks = std::max(blocks, st[m].blocks());
  }
  std::vector<AttentionRowState*> ptrs;
  for (auto& s : st) ptrs.push_back(&s);
  for (size_t b = 0; b < blocks; b += chunk) {
    if (together) {
      AttentionRowState::add_rows(ptrs, kv.view, b, b + chunk);
    } else {
      for (auto& s : st) s.add(kv.view, b, b + chunk);
    }
  }
  RowsOut r{std::vector<float>(n * n_heads * D), std::vector<float>(n * n_heads * 2)};
  for (size_t m = 0; m < n; ++m) {
    st[m].finish(r.out.data() + m * n_heads * D);
    st[m].max_sum(r.max_sum.data() + m * n_heads * 2);
  }
  return r;
}

TEST(attention_rows, rows_sharing_passes_get_the_bits_of_each_row_added_alone) {
  std::mt19937 rng(7);
  // (query heads, KV heads, head_dim): one, two and four query heads per KV head;
  // a head_dim that is not a multiple of the vector width.
  const std::tuple<size_t, size_t, size_t> shapes[] = {{4, 4, 64}, {6, 3, 40}, {4, 2, 64}, {8, 2, 32}};
  // Rows within one block (positions 100..104: the last block partial for all),
  // across a block's end (120..128: some rows' last block is whole, others' is the
  // next one) and over several blocks (30..69: rows done before later chunks
  // begin); 1, 2, 3, 5, 9 and 40 rows.
  const std::pair<size_t, size_t> runs[] = {{100, 5}, {120, 9}, {300, 1}, {30, 2}, {47, 3}, {30, 40}};
  for_each_simd_path([&](SimdPath path) {
    for (DType t : kAllDTypes) {
      for (auto [n_heads, kv_heads, D] : shapes) {
        for (size_t bt : {16u, 20u}) {  // 20: blocks that end inside a 16-lane vector
          const Kv kv = random_kv(rng, t, kv_heads, D, bt, 640 / bt);
          for (auto [first, n] : runs) {
            const auto q = random_floats(rng, n * n_heads * D, -2.f, 2.f);
            for (size_t chunk : {1u, 3u, 64u}) {
              const RowsOut alone = attend_rows(kv, q, n_heads, first, n, chunk, false);
              const RowsOut together = attend_rows(kv, q, n_heads, first, n, chunk, true);
              const std::string at =
                  std::string(simd_path_name(path)) + " " + std::string(dtype_name(t)) + " heads " +
                  std::to_string(n_heads) + "/" + std::to_string(kv_heads) + " block " +
                  std::to_string(bt) + " rows " + std::to_string(first) + "+" + std::to_string(n) +
                  " chunk " + std::to_string(chunk);
              ASSERT_EQ(std::memcmp(alone.out.data(), together.out.data(), alone.out.size() * 4), 0)
                  << at;
              ASSERT_EQ(std::memcmp(alone.max_sum.data(), together.max_sum.data(),
                                    alone.max_sum.size() * 4),
                        0)
                  << at;
            }
          }
        }
      }
    }
  });
}

TEST(attention_rows, a_kv_head_with_few_query_heads_shares_its_passes_among_rows) {
  for_each_simd_path([&](SimdPath path) {
    const size_t pass = path == SimdPath::avx512 || path == SimdPath::avx512bf16 ||
                                path == SimdPath::amx
                            ? 4
                            : 2;
    EXPECT_EQ(attention_rows_per_pass(8, 8), pass) << simd_path_name(path);
    EXPECT_EQ(attention_rows_per_pass(4, 2), pass / 2) << simd_path_name(path);
    EXPECT_EQ(attention_rows_per_pass(32, 8), 1u) << simd_path_name(path);
    EXPECT_EQ(attention_rows_per_pass(28, 4), 1u) << simd_path_name(path);
    EXPECT_LE(attention_rows_per_pass(1, 1), kAttentionMaxRowsPerPass);
  });
}

TEST(attention_rows, rows_not_at_the_first_block_or_of_another_shape_are_errors) {
  std::mt19937 rng(3);
  const Kv kv = random_kv(rng, DType::bf16, 2, 64, 16, 8);
  const auto q = random_floats(rng, 2 * 4 * 64);
  AttentionRowState a, b;
  a.begin(q.data(), 4, kv.view, 100, 0.25f);
  b.begin(q.data() + 4 * 64, 4, kv.view, 101, 0.25f);
  a.add(kv.view, 0, 2);
  std::vector<AttentionRowState*> rows{&a, &b};
  test::expect_error_naming([&] { AttentionRowState::add_rows(rows, kv.view, 0, 4); },
                            "add_rows: a row is at block 2, not at block_begin 0");
  AttentionRowState c;
  const Kv other = random_kv(rng, DType::bf16, 4, 64, 16, 8);
  c.begin(q.data(), 4, other.view, 100, 0.25f);
  std::vector<AttentionRowState*> mixed{&b, &c};
  test::expect_error_naming([&] { AttentionRowState::add_rows(mixed, kv.view, 0, 4); },
                            "add_rows: rows begun over different shapes");
  // The same row twice would merge its blocks twice into one state.
  AttentionRowState d;
  d.begin(q.data(), 4, kv.view, 100, 0.25f);
  std::vector<AttentionRowState*> twice{&d, &b, &d};
  test::expect_error_naming([&] { AttentionRowState::add_rows(twice, kv.view, 0, 4); },
                            "add_rows: a row is listed twice");
  // A block the rows attend to that the table does not map, named.
  Kv holed = random_kv(rng, DType::bf16, 2, 64, 16, 8);
  holed.table[1] = -1;
  AttentionRowState e, f;
  e.begin(q.data(), 4, holed.view, 100, 0.25f);
  f.begin(q.data() + 4 * 64, 4, holed.view, 101, 0.25f);
  std::vector<AttentionRowState*> pair{&e, &f};
  test::expect_error_naming([&] { AttentionRowState::add_rows(pair, holed.view, 0, 4); },
                            "block_table[1] = -1");
}

}  // namespace
}  // namespace vc::cpu

// Tests of vc::cpu::attention_row on every supported SIMD path: accuracy against a
// double precision softmax over a shuffled (non-contiguous) block table, the GQA
// head mapping, and bit-exactness: positions past n_ctx are never used, each query
// head's result is the same computed alone or with its group, and results do not
// depend on other calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/error.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::Encoded;
using test::for_each_simd_path;
using test::kAllDTypes;
using test::random_floats;

struct Shape {
  size_t n_heads, kv_heads, head_dim, block_tokens;
};

/// A paged cache of `capacity` positions in shuffled physical blocks (plus spare
/// blocks that are never referenced).
struct Cache {
  Shape s;
  DType dtype;
  size_t n_logical = 0, n_physical = 0;
  std::vector<int32_t> table;
  Encoded k, v;

  Cache(const Shape& shape, DType t, size_t capacity, std::mt19937& rng) : s(shape), dtype(t) {
    n_logical = (capacity + s.block_tokens - 1) / s.block_tokens;
    n_physical = n_logical + 3;
    std::vector<int32_t> phys(n_physical);
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), rng);
    table.assign(phys.begin(), phys.begin() + long(n_logical));
    const size_t n = n_physical * s.kv_heads * s.block_tokens * s.head_dim;
    k = encode(random_floats(rng, n), t);
    v = encode(random_floats(rng, n), t);
  }
  [[nodiscard]] size_t index(size_t pos, size_t g, size_t d) const {
    const size_t blk = size_t(table[pos / s.block_tokens]);
    return ((blk * s.kv_heads + g) * s.block_tokens + pos % s.block_tokens) * s.head_dim + d;
  }
  [[nodiscard]] PagedKv view() const {
    PagedKv kv;
    kv.k = k.bytes.data();
    kv.v = v.bytes.data();
    kv.dtype = dtype;
    kv.block_tokens = s.block_tokens;
    kv.kv_heads = s.kv_heads;
    kv.head_dim = s.head_dim;
    kv.block_table = table.data();
    return kv;
  }
  /// Overwrites K and V of one position (all KV heads) with `value`, re-encoded.
  void poison(size_t pos, float value) {
    for (Encoded* e : {&k, &v}) {
      for (size_t g = 0; g < s.kv_heads; ++g) {
        for (size_t d = 0; d < s.head_dim; ++d) {
          const size_t i = index(pos, g, d);
          from_f32(dtype, &value, e->bytes.data() + i * dtype_size(dtype), 1);
        }
      }
    }
  }
};

std::vector<float> run(const Cache& c, const std::vector<float>& q, size_t n_ctx, float scale) {
  std::vector<float> out(c.s.n_heads * c.s.head_dim, -777.f);
  attention_row(q.data(), c.s.n_heads, c.view(), n_ctx, scale, out.data());
  return out;
}

void expect_matches_reference(const Cache& c, const std::vector<float>& q, size_t n_ctx,
                              float scale, const std::vector<float>& out) {
  const size_t H = c.s.n_heads, D = c.s.head_dim, group = H / c.s.kv_heads;
  for (size_t h = 0; h < H; ++h) {
    const size_t g = h / group;  // GQA: consecutive query heads share a KV head
    std::vector<double> score(n_ctx);
    double mx = -1e300;
    for (size_t t = 0; t < n_ctx; ++t) {
      double s = 0;
      for (size_t d = 0; d < D; ++d) s += double(q[h * D + d]) * c.k.values[c.index(t, g, d)];
      score[t] = s * scale;
      mx = std::max(mx, score[t]);
    }
    double sum = 0;
    for (auto& s : score) sum += (s = std::exp(s - mx));
    for (size_t d = 0; d < D; ++d) {
      double ref = 0;
      for (size_t t = 0; t < n_ctx; ++t) ref += score[t] * c.v.values[c.index(t, g, d)];
      ref /= sum;
      ASSERT_NEAR(out[h * D + d], ref, 1e-5 + 1e-5 * std::fabs(ref))
          << "h=" << h << " d=" << d << " n_ctx=" << n_ctx << " " << dtype_name(c.dtype);
    }
  }
}

const Shape kShapes[] = {
    {4, 2, 64, 16},  // the small model: 4 query heads on 2 KV heads
    {8, 1, 40, 5},   // head_dim not a multiple of 16, tiny blocks, group of 8
    {3, 3, 24, 7},   // no sharing (MHA)
    {7, 1, 72, 16},  // group of 7: uneven passes over the group
};

TEST(attention, matches_a_double_precision_reference_over_a_shuffled_block_table) {
  std::mt19937 rng(21);
  for_each_simd_path([&](SimdPath) {
    for (DType t : kAllDTypes) {
      for (const Shape& s : kShapes) {
        const Cache c(s, t, 100, rng);
        const float scale = 1.f / std::sqrt(float(s.head_dim));
        for (size_t n_ctx : {1u, 2u, 5u, 16u, 17u, 64u, 100u}) {
          const auto q = random_floats(rng, s.n_heads * s.head_dim, -3.f, 3.f);
          expect_matches_reference(c, q, n_ctx, scale, run(c, q, n_ctx, scale));
        }
      }
    }
  });
}

TEST(attention, long_context_matches_the_reference) {
  std::mt19937 rng(22);
  for_each_simd_path([&](SimdPath) {
    const Shape s{4, 2, 64, 16};
    const Cache c(s, DType::bf16, 3000, rng);
    const auto q = random_floats(rng, s.n_heads * s.head_dim, -4.f, 4.f);
    expect_matches_reference(c, q, 2999, 0.125f, run(c, q, 2999, 0.125f));
  });
}

TEST(attention, positions_at_and_after_n_ctx_are_never_used_whether_n_ctx_ends_mid_block_or_not) {
  std::mt19937 rng(23);
  for_each_simd_path([&](SimdPath) {
    for (DType t : kAllDTypes) {
      for (const Shape& s : kShapes) {
        for (size_t n_ctx : {s.block_tokens - 1, s.block_tokens, 2 * s.block_tokens + 1}) {
          Cache c(s, t, 4 * s.block_tokens, rng);
          const auto q = random_floats(rng, s.n_heads * s.head_dim);
          const auto before = run(c, q, n_ctx, 0.3f);
          for (size_t pos = n_ctx; pos < 4 * s.block_tokens; ++pos) {
            c.poison(pos, std::numeric_limits<float>::quiet_NaN());
          }
          const auto after = run(c, q, n_ctx, 0.3f);
          ASSERT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4), 0)
              << "n_ctx=" << n_ctx << " " << dtype_name(t);
        }
      }
    }
  });
}

TEST(attention, each_query_head_is_bit_identical_computed_alone_or_with_its_group) {
  std::mt19937 rng(24);
  for_each_simd_path([&](SimdPath) {
    for (DType t : kAllDTypes) {
      const Shape s{14, 2, 40, 8};  // groups of 7 query heads per KV head
      const Cache c(s, t, 50, rng);
      const auto q = random_floats(rng, s.n_heads * s.head_dim, -2.f, 2.f);
      const size_t n_ctx = 45;
      const auto grouped = run(c, q, n_ctx, 0.2f);
      // The same cache seen as single-KV-head caches: copy KV head g out.
      for (size_t g = 0; g < s.kv_heads; ++g) {
        Cache one = c;
        one.s = {1, 1, s.head_dim, s.block_tokens};
        const size_t per_head = s.block_tokens * s.head_dim * dtype_size(t);
        for (Encoded* e : {&one.k, &one.v}) {
          const Encoded& src = e == &one.k ? c.k : c.v;
          e->bytes.assign(c.n_physical * per_head, 0);
          for (size_t b = 0; b < c.n_physical; ++b) {
            std::memcpy(e->bytes.data() + b * per_head,
                        src.bytes.data() + (b * s.kv_heads + g) * per_head, per_head);
          }
        }
        for (size_t h = g * 7; h < (g + 1) * 7; ++h) {
          const std::vector<float> qh(q.begin() + long(h * s.head_dim),
                                      q.begin() + long((h + 1) * s.head_dim));
          const auto alone = run(one, qh, n_ctx, 0.2f);
          ASSERT_EQ(std::memcmp(alone.data(), grouped.data() + h * s.head_dim,
                                s.head_dim * sizeof(float)),
                    0)
              << "head " << h << " " << dtype_name(t);
        }
      }
    }
  });
}

TEST(attention, a_row_result_does_not_depend_on_other_rows_computed_before_or_concurrently) {
  std::mt19937 rng(25);
  for_each_simd_path([&](SimdPath p) {
    const Shape s{4, 2, 64, 16};
    const Cache c(s, DType::bf16, 200, rng);
    std::vector<std::vector<float>> qs;
    for (int i = 0; i < 6; ++i) qs.push_back(random_floats(rng, s.n_heads * s.head_dim));
    const size_t ctx[] = {1, 16, 37, 100, 199, 200};
    std::vector<std::vector<float>> first;
    for (int i = 0; i < 6; ++i) first.push_back(run(c, qs[i], ctx[i], 0.125f));
    // Reverse order, different thread: same bits.
    std::vector<std::vector<float>> second(6);
    std::thread th([&] {
      test::SimdPathGuard guard;  // the path is process-wide; keep it as the caller set it
      set_simd_path(p);
      for (int i = 5; i >= 0; --i) second[size_t(i)] = run(c, qs[size_t(i)], ctx[i], 0.125f);
    });
    th.join();
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(std::memcmp(first[size_t(i)].data(), second[size_t(i)].data(),
                            first[size_t(i)].size() * 4),
                0)
          << i;
    }
  });
}

TEST(attention, splitting_kv_heads_across_a_pool_is_bit_identical_to_one_thread) {
  std::mt19937 rng(27);
  ThreadPool pool(2);
  for_each_simd_path([&](SimdPath) {
    for (DType t : kAllDTypes) {
      const Shape s{6, 3, 40, 16};  // 3 KV heads: uneven parts over 2 threads
      Cache c(s, t, 1100, rng);
      for (bool sequential : {false, true}) {  // scattered and consecutive blocks
        if (sequential) std::iota(c.table.begin(), c.table.end(), 0);
        const auto q = random_floats(rng, s.n_heads * s.head_dim, -2.f, 2.f);
        for (size_t n_ctx : {600u, 1100u}) {  // long enough to use the pool
          const auto one = run(c, q, n_ctx, 0.2f);
          std::vector<float> split(one.size(), -1.f);
          attention_row(q.data(), s.n_heads, c.view(), n_ctx, 0.2f, split.data(), &pool);
          ASSERT_EQ(std::memcmp(one.data(), split.data(), one.size() * 4), 0)
              << dtype_name(t) << " n_ctx=" << n_ctx;
          expect_matches_reference(c, q, n_ctx, 0.2f, split);
        }
      }
    }
  });
}

TEST(attention, empty_context_gives_zeros_and_bad_shapes_are_rejected) {
  std::mt19937 rng(26);
  const Shape s{4, 2, 16, 4};
  Cache c(s, DType::f32, 8, rng);
  const auto q = random_floats(rng, 4 * 16);
  EXPECT_EQ(run(c, q, 0, 1.f), std::vector<float>(64, 0.f));
  std::vector<float> out(64);
  EXPECT_THROW(attention_row(q.data(), 3, c.view(), 4, 1.f, out.data()), vc::Error);
  PagedKv bad = c.view();
  bad.block_tokens = 0;
  EXPECT_THROW(attention_row(q.data(), 4, bad, 4, 1.f, out.data()), vc::Error);
  c.table[1] = -1;
  EXPECT_THROW(attention_row(q.data(), 4, c.view(), 5, 1.f, out.data()), vc::Error);
  EXPECT_NO_THROW(attention_row(q.data(), 4, c.view(), 4, 1.f, out.data()));  // block 1 unused
}

}  // namespace
}  // namespace vc::cpu

// Tests of vc::cpu::AttentionRowState: attention over KV that arrives in chunks of
// blocks, each chunk in its own staging buffer with its own block table, gives the
// bits of attention_row over the whole context (and the same softmax maxima and
// sums), on every SIMD path and dtype.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/error.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

using test::encode;
using test::for_each_simd_path;
using test::kAllDTypes;
using test::random_floats;

// A contiguous KV of `blocks` blocks ([blocks, kv_heads, bt, head_dim]) and a view
// of blocks [first, first + n) copied into a buffer of their own, whose block table
// maps absolute block j to slot j - first (what a chunk's staging holds).
struct Staged {
  std::vector<unsigned char> k, v;
  std::vector<int32_t> table;
};

Staged stage(const std::vector<unsigned char>& k, const std::vector<unsigned char>& v, size_t block_bytes,
             size_t first, size_t n, size_t total_blocks) {
  Staged s;
  s.k.assign(k.begin() + long(first * block_bytes), k.begin() + long((first + n) * block_bytes));
  s.v.assign(v.begin() + long(first * block_bytes), v.begin() + long((first + n) * block_bytes));
  s.table.assign(total_blocks, -1);
  for (size_t j = first; j < first + n; ++j) s.table[j] = int32_t(j - first);
  return s;
}

TEST(attention_chunked, chunks_of_blocks_in_separate_buffers_give_attention_row_bits) {
  std::mt19937 rng(41);
  ThreadPool pool(2);
  for_each_simd_path([&](SimdPath) {
    for (DType t : kAllDTypes) {
      const size_t n_heads = 6, kv_heads = 3, D = 40, bt = 16, total = 1300;
      const size_t blocks = (total + bt - 1) / bt;
      const size_t block_bytes = kv_heads * bt * D * dtype_size(t);
      const auto k = encode(random_floats(rng, blocks * kv_heads * bt * D), t).bytes;
      const auto v = encode(random_floats(rng, blocks * kv_heads * bt * D), t).bytes;
      std::vector<int32_t> ident(blocks);
      std::iota(ident.begin(), ident.end(), 0);
      const PagedKv whole{k.data(), v.data(), t, bt, kv_heads, D, ident.data()};
      const auto q = random_floats(rng, n_heads * D, -2.f, 2.f);
      for (size_t n_ctx : {1u, 16u, 17u, 700u, 1300u}) {
        std::vector<float> ref(n_heads * D), got(ref.size(), -1.f);
        std::vector<float> ref_ms(n_heads * 2), got_ms(n_heads * 2);
        attention_row(q.data(), n_heads, whole, n_ctx, 0.3f, ref.data(), &pool, ref_ms.data());
        for (size_t chunk : {1u, 3u, 32u, 100u}) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            AttentionRowState st;
            st.begin(q.data(), n_heads, whole, n_ctx, 0.3f);
            for (size_t b = 0; b < st.blocks(); b += chunk) {
              const size_t n = std::min(chunk, blocks - b);
              const Staged s = stage(k, v, block_bytes, b, n, blocks);
              const PagedKv view{s.k.data(), s.v.data(), t, bt, kv_heads, D, s.table.data()};
              st.add(view, b, b + n, p);
            }
            st.finish(got.data());
            ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * 4), 0)
                << dtype_name(t) << " n_ctx=" << n_ctx << " chunk=" << chunk
                << " pool=" << (p != nullptr);
            // The softmax maximum and sum each head divided by: the same bits too.
            st.max_sum(got_ms.data());
            ASSERT_EQ(std::memcmp(ref_ms.data(), got_ms.data(), ref_ms.size() * 4), 0)
                << dtype_name(t) << " n_ctx=" << n_ctx << " chunk=" << chunk;
          }
        }
      }
    }
  });
}

TEST(attention_chunked, blocks_out_of_order_or_missing_are_rejected) {
  std::mt19937 rng(42);
  const size_t bt = 4, D = 8, blocks = 4;
  const auto k = encode(random_floats(rng, blocks * bt * D), DType::f32).bytes;
  std::vector<int32_t> ident{0, 1, 2, 3};
  const PagedKv kv{k.data(), k.data(), DType::f32, bt, 1, D, ident.data()};
  const auto q = random_floats(rng, 2 * D);
  std::vector<float> out(2 * D);
  AttentionRowState st;
  st.begin(q.data(), 2, kv, 16, 1.f);
  EXPECT_THROW(st.add(kv, 1, 2), vc::Error);  // block 0 first
  st.add(kv, 0, 2);
  EXPECT_THROW(st.finish(out.data()), vc::Error);  // blocks 2..3 missing
  st.add(kv, 2, 4);
  EXPECT_NO_THROW(st.finish(out.data()));
  AttentionRowState empty;
  empty.begin(q.data(), 2, kv, 0, 1.f);
  empty.finish(out.data());
  EXPECT_EQ(out, std::vector<float>(2 * D, 0.f));
}

}  // namespace
}  // namespace vc::cpu

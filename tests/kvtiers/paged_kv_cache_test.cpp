// Paged KV cache: storage round trip, block tables, rollback.
#include <gtest/gtest.h>

#include <vector>

#include "kvtiers/paged_kv_cache.hpp"

namespace vc {
namespace {

KvCacheConfig small(DType t) {
  KvCacheConfig c;
  c.num_layers = 2;
  c.kv_heads = 3;
  c.head_dim = 5;
  c.block_tokens = 4;
  c.num_blocks = 8;
  c.dtype = t;
  return c;
}

TEST(paged_kv_cache, f32_storage_round_trips_exactly_and_bf16_rounds_to_nearest) {
  for (DType t : {DType::f32, DType::bf16}) {
    PagedKvCache cache(small(t));
    KvSequence s;
    cache.reserve(s, 10);
    EXPECT_EQ(s.blocks.size(), 3u);
    std::vector<float> k(15), v(15), k2(15), v2(15);
    for (size_t pos = 0; pos < 10; ++pos) {
      for (size_t i = 0; i < 15; ++i) {
        k[i] = 0.1f * float(pos) + 0.001f * float(i);
        v[i] = -k[i];
      }
      cache.write(1, s, pos, k.data(), v.data());
      cache.read(1, s, pos, k2.data(), v2.data());
      for (size_t i = 0; i < 15; ++i) {
        const float expect = t == DType::f32 ? k[i] : bf16_to_f32(f32_to_bf16(k[i]));
        EXPECT_EQ(k2[i], expect);
        EXPECT_EQ(v2[i], -expect);
      }
    }
    EXPECT_EQ(s.length, 10u);
    EXPECT_EQ(cache.bytes_of(s), 10 * 2 * 2 * 15 * dtype_size(t));
  }
}

TEST(paged_kv_cache, truncation_releases_whole_blocks_past_the_new_length) {
  PagedKvCache cache(small(DType::bf16));
  KvSequence s;
  cache.reserve(s, 12);
  std::vector<float> row(15, 1.0f);
  for (size_t p = 0; p < 12; ++p) cache.write(0, s, p, row.data(), row.data());
  cache.truncate(s, 5);
  EXPECT_EQ(s.length, 5u);
  EXPECT_EQ(s.blocks.size(), 2u);
  EXPECT_EQ(cache.pool().used_blocks(), 2u);
  cache.free(s);
  EXPECT_EQ(cache.pool().used_blocks(), 0u);
}

TEST(paged_kv_cache, two_sequences_never_share_a_slot) {
  PagedKvCache cache(small(DType::f32));
  KvSequence a, b;
  cache.reserve(a, 8);
  cache.reserve(b, 8);
  std::vector<float> one(15, 1.0f), two(15, 2.0f), out(15), out2(15);
  for (size_t p = 0; p < 8; ++p) {
    cache.write(0, a, p, one.data(), one.data());
    cache.write(0, b, p, two.data(), two.data());
  }
  for (size_t p = 0; p < 8; ++p) {
    cache.read(0, a, p, out.data(), out2.data());
    EXPECT_EQ(out, one);
  }
}

}  // namespace
}  // namespace vc

// The fast-memory bound admission reserves per request (runtime/fast_memory_need.hpp):
// the tail's blocks of a vericache request.
#include <gtest/gtest.h>

#include "runtime/fast_memory_need.hpp"

namespace vc {
namespace {

KvCacheConfig layout(size_t block_tokens) {
  KvCacheConfig kv;
  kv.num_layers = 16;
  kv.kv_heads = 8;
  kv.head_dim = 64;
  kv.block_tokens = block_tokens;
  return kv;
}

DraftSpec vericache_spec(size_t prompt, size_t gen, size_t fold_every) {
  DraftSpec s;
  s.prompt.assign(prompt, 0);
  s.mode = DecodeMode::vericache;
  s.compressor = "kivi";
  s.ratio = 4;
  s.max_new_tokens = gen;
  s.fold_every = fold_every;
  return s;
}

TEST(fast_memory_need, a_request_shorter_than_its_fold_interval_reserves_only_its_own_tail) {
  const KvCacheConfig kv = layout(64);
  const size_t block = 64 * 2 * 16 * 8 * 64 * 2;  // bytes of one 64-position block
  // 4096 + 32 new + 65 (a draft round of 64 and its bonus row) ends in block 65:
  // blocks 64 and 65, where the fold interval's bound would take 5 (64 + 2 x 65
  // positions, wherever they start).
  EXPECT_EQ(fast_memory_need(vericache_spec(4096, 32, 64), kv, 64).blocks, 2 * block);
  // The same tail without folding: the bound is the same.
  EXPECT_EQ(fast_memory_need(vericache_spec(4096, 32, 0), kv, 64).blocks, 2 * block);
}

TEST(fast_memory_need, a_long_request_reserves_the_fold_intervals_tail) {
  const KvCacheConfig kv = layout(64);
  const size_t block = 64 * 2 * 16 * 8 * 64 * 2;
  // 1000 new tokens: the tail is bounded by the fold interval, 64 + 2 x 65 = 194
  // positions in at most 4 + 1 blocks, not by the 17 its span would take.
  EXPECT_EQ(fast_memory_need(vericache_spec(4096, 1000, 64), kv, 64).blocks, 5 * block);
  EXPECT_EQ(fast_memory_need(vericache_spec(4096, 1000, 0), kv, 64).blocks, 17 * block);
}

}  // namespace
}  // namespace vc

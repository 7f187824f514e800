// KvMirror names exactly the blocks a copy of a paged cache must refresh: every
// block on first sight, then only blocks written since (per layer), through
// rollbacks and reuse of freed blocks; repeats and released entries skipped, runs
// of consecutive blocks merged; it knows when its cache is gone.
#include "kvtiers/kv_mirror.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/error.hpp"

namespace vc {
namespace {

using Runs = std::vector<std::pair<int32_t, int32_t>>;

KvCacheConfig config() {
  KvCacheConfig c;
  c.num_layers = 2, c.kv_heads = 1, c.head_dim = 4, c.block_tokens = 4, c.num_blocks = 16;
  return c;
}

void write_positions(PagedKvCache& cache, KvSequence& seq, size_t layer, size_t from, size_t to) {
  const std::vector<float> row(4, 1.0f);
  cache.reserve(seq, to);
  for (size_t p = from; p < to; ++p) cache.write(layer, seq, p, row.data(), row.data());
}

TEST(kv_mirror, names_every_block_once_then_only_the_blocks_written_since_in_that_layer) {
  PagedKvCache cache(config());
  KvSequence seq;
  for (size_t l = 0; l < 2; ++l) write_positions(cache, seq, l, 0, 10);  // blocks 0, 1, 2
  KvMirror mirror(cache);
  EXPECT_EQ(mirror.stale(0, seq.blocks), (Runs{{0, 3}}));
  EXPECT_EQ(mirror.stale(0, seq.blocks), Runs{});
  EXPECT_EQ(mirror.stale(1, seq.blocks), (Runs{{0, 3}}));
  write_positions(cache, seq, 0, 10, 11);  // a decode step of layer 0: block 2
  EXPECT_EQ(mirror.stale(0, seq.blocks), (Runs{{2, 1}}));
  EXPECT_EQ(mirror.stale(1, seq.blocks), Runs{});
}

TEST(kv_mirror, a_rewrite_after_a_rollback_and_a_freed_block_reused_are_named_again) {
  PagedKvCache cache(config());
  KvSequence a, b;
  write_positions(cache, a, 0, 0, 8);  // blocks 0, 1
  KvMirror mirror(cache);
  (void)mirror.stale(0, a.blocks);
  cache.truncate(a, 5);
  write_positions(cache, a, 0, 5, 6);  // position 5 rewritten: block 1
  EXPECT_EQ(mirror.stale(0, a.blocks), (Runs{{1, 1}}));
  cache.free(a);
  write_positions(cache, b, 0, 0, 2);  // b takes a freed block
  const Runs runs = mirror.stale(0, b.blocks);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].first, b.blocks[0]);
}

TEST(kv_mirror, skips_released_entries_and_repeats_and_merges_consecutive_blocks) {
  PagedKvCache cache(config());
  KvMirror mirror(cache);
  const std::vector<int32_t> tables{-1, 3, 4, 5, 3, 9, -1, 10, 4};
  EXPECT_EQ(mirror.stale(0, tables), (Runs{{3, 3}, {9, 2}}));
  EXPECT_EQ(mirror.stale(0, tables), Runs{});
  EXPECT_THROW((void)mirror.stale(0, std::vector<int32_t>{16}), Error);
  EXPECT_THROW((void)mirror.stale(2, tables), Error);
}

TEST(kv_mirror, writes_the_copy_took_itself_keep_a_current_block_current_and_a_stale_one_stale) {
  PagedKvCache cache(config());
  KvSequence seq;
  write_positions(cache, seq, 0, 0, 6);  // blocks 0, 1
  KvMirror mirror(cache);
  EXPECT_EQ(mirror.stale(0, seq.blocks), (Runs{{0, 2}}));
  // A decode step: position 6 into block 1, which the copy took too.
  write_positions(cache, seq, 0, 6, 7);
  const std::vector<int32_t> one = {1};
  mirror.wrote_through(0, one);
  EXPECT_EQ(mirror.stale(0, seq.blocks), Runs{});
  // Two writes into block 1, only one of them through the copy: stale.
  write_positions(cache, seq, 0, 7, 8);
  write_positions(cache, seq, 0, 7, 8);
  mirror.wrote_through(0, one);
  EXPECT_EQ(mirror.stale(0, seq.blocks), (Runs{{1, 1}}));
  // A prefill chunk's rows: several writes per block, all through the copy.
  write_positions(cache, seq, 0, 8, 12);  // block 2, never copied
  const std::vector<int32_t> four = {2, 2, 2, 2};
  mirror.wrote_through(0, four);
  EXPECT_EQ(mirror.stale(0, seq.blocks), (Runs{{2, 1}})) << "a block never copied is copied whole";
  write_positions(cache, seq, 0, 11, 12);
  const std::vector<int32_t> skipped = {-1, 2};
  mirror.wrote_through(0, skipped);
  EXPECT_EQ(mirror.stale(0, seq.blocks), Runs{});
  EXPECT_EQ(mirror.stale(1, seq.blocks), (Runs{{0, 3}})) << "another layer's blocks are its own";
}

TEST(kv_mirror, knows_when_its_cache_is_gone) {
  auto cache = std::make_unique<PagedKvCache>(config());
  KvMirror mirror(*cache);
  EXPECT_FALSE(mirror.expired());
  const uint64_t id = cache->id();
  cache.reset();
  EXPECT_TRUE(mirror.expired());
  EXPECT_THROW((void)mirror.stale(0, std::vector<int32_t>{0}), Error);
  EXPECT_NE(PagedKvCache(config()).id(), id);  // ids are never reused
}

}  // namespace
}  // namespace vc

// FullTier::lend_blocks: the host tier lends whole written blocks that lie in one of
// its chunks in place (the bytes read_blocks would copy, counted as read the same
// way); a run across two chunks, a block not fully written, and the disk tier lend
// nothing; a loan keeps its chunk alive after the request is truncated or released.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"

namespace vc {
namespace {

// 2 layers, 2 KV heads of 16 dims, blocks of 4 positions, bf16.
KvCacheConfig config() { return KvCacheConfig{2, 2, 16, 4, 64, DType::bf16, false}; }

// Writes n random positions of every layer of request `id`.
void fill(FullTier& tier, uint64_t id, size_t n, uint32_t seed) {
  const KvCacheConfig& c = tier.config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  for (size_t p = 0; p < n; ++p)
    for (size_t l = 0; l < c.num_layers; ++l) {
      for (float& x : k) x = dist(rng);
      for (float& x : v) x = dist(rng);
      tier.write(id, l, p, k.data(), v.data());
    }
}

size_t block_bytes(const KvCacheConfig& c) {
  return c.block_tokens * c.kv_heads * c.head_dim * dtype_size(c.dtype);
}

TEST(lent_blocks, hold_the_bytes_read_blocks_copies_and_count_as_read) {
  const KvCacheConfig c = config();
  HostFullTier tier(c, /*chunk_blocks=*/3);
  tier.create(7);
  fill(tier, 7, 30, 1);  // 7 whole blocks and 2 positions of the 8th
  const size_t bb = block_bytes(c);
  for (size_t layer = 0; layer < c.num_layers; ++layer)
    for (size_t first : {0u, 1u, 3u, 4u}) {
      const size_t n = first % 3 == 0 ? 3 : 2;  // up to the end of the chunk
      std::vector<std::byte> k(tier.staging_bytes(n * c.block_tokens)), v(k.size());
      static_cast<FullTier&>(tier).read_blocks(7, layer, first, n, k.data(), v.data());
      const size_t read_before = tier.bytes_read_total();
      const auto lent = tier.lend_blocks(7, layer, first, n);
      ASSERT_TRUE(lent.has_value()) << "layer " << layer << " blocks " << first << "+" << n;
      EXPECT_EQ(std::memcmp(lent->k, k.data(), n * bb), 0) << "K, layer " << layer << " block " << first;
      EXPECT_EQ(std::memcmp(lent->v, v.data(), n * bb), 0) << "V, layer " << layer << " block " << first;
      EXPECT_EQ(tier.bytes_read_total() - read_before, n * bb * 2) << "a loan counts as read";
    }
}

TEST(lent_blocks, runs_across_chunks_partly_written_blocks_and_the_disk_tier_lend_nothing) {
  const KvCacheConfig c = config();
  HostFullTier host(c, /*chunk_blocks=*/3);
  host.create(1);
  fill(host, 1, 30, 2);
  const size_t read_before = host.bytes_read_total();
  EXPECT_FALSE(host.lend_blocks(1, 0, 2, 2).has_value()) << "blocks 2 and 3 lie in two chunks";
  EXPECT_FALSE(host.lend_blocks(1, 0, 6, 2).has_value()) << "block 7 holds 2 of its 4 positions";
  EXPECT_FALSE(host.lend_blocks(1, 1, 9, 1).has_value()) << "block 9 was never written";
  EXPECT_FALSE(host.lend_blocks(1, 0, 0, 0).has_value()) << "an empty run";
  EXPECT_EQ(host.bytes_read_total(), read_before) << "nothing lent, nothing counted";
  EXPECT_TRUE(host.lend_blocks(1, 0, 6, 1).has_value()) << "block 6 is whole";

  char tmpl[] = "/tmp/vc-lent-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  {
    DiskFullTier disk(c, tmpl);
    disk.create(1);
    fill(disk, 1, 30, 2);
    EXPECT_FALSE(disk.lend_blocks(1, 0, 0, 1).has_value()) << "the disk tier holds no memory to lend";
  }
  std::filesystem::remove_all(tmpl);
}

TEST(lent_blocks, a_loan_keeps_its_chunk_after_the_request_is_truncated_or_released) {
  const KvCacheConfig c = config();
  HostFullTier tier(c, /*chunk_blocks=*/2);
  tier.create(3);
  fill(tier, 3, 16, 3);  // 4 blocks: 2 chunks
  const size_t bb = block_bytes(c);
  std::vector<std::byte> want(2 * bb), scratch(2 * bb);
  static_cast<FullTier&>(tier).read_blocks(3, 1, 2, 2, want.data(), scratch.data());
  ASSERT_TRUE(tier.lend_blocks(3, 1, 2, 2).has_value());
  const FullTier::LentBlocks lent = tier.lend_blocks(3, 1, 2, 2).value();
  tier.truncate(3, 4);  // drops the second chunk from the tier
  EXPECT_LT(tier.bytes_allocated(), 2 * 2 * c.num_layers * 2 * bb);
  tier.release(3);
  EXPECT_EQ(tier.bytes_allocated(), 0u);
  // Still readable (and, under AddressSanitizer, not freed): the loan holds it.
  EXPECT_EQ(std::memcmp(lent.k, want.data(), 2 * bb), 0);
}

TEST(lent_blocks, the_host_tier_hands_each_new_chunk_page_aligned_to_its_placer) {
  const KvCacheConfig c = config();
  HostFullTier tier(c, /*chunk_blocks=*/2);
  std::vector<std::pair<void*, size_t>> placed;
  std::vector<bool> aligned;
  tier.set_memory_placer([&](void* p, size_t bytes) {
    placed.emplace_back(p, bytes);
    aligned.push_back(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  });
  tier.create(1);
  fill(tier, 1, 20, 4);  // 5 blocks: 3 chunks
  ASSERT_EQ(placed.size(), 3u);
  for (size_t i = 0; i < placed.size(); ++i) {
    EXPECT_EQ(placed[i].second, tier.bytes_allocated() / 3) << "a whole chunk";
    EXPECT_TRUE(aligned[i]) << "page-aligned";
  }
  // The chunks placed are the ones lent: their bytes are the tier's.
  const auto lent = tier.lend_blocks(1, 0, 2, 2);
  ASSERT_TRUE(lent.has_value());
  EXPECT_TRUE(lent->k >= static_cast<const std::byte*>(placed[1].first) &&
              lent->k < static_cast<const std::byte*>(placed[1].first) + placed[1].second);
  tier.set_memory_placer(nullptr);
  fill(tier, 1, 28, 5);  // (rewrites 0..19, adds 2 blocks: one more chunk, not placed)
  EXPECT_EQ(placed.size(), 3u);
}

TEST(lent_blocks, unknown_requests_and_layers_are_errors_naming_them) {
  HostFullTier tier(config());
  tier.create(1);
  try {
    (void)tier.lend_blocks(2, 0, 0, 1);
    ADD_FAILURE() << "no error for an unknown request";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown request 2"), std::string::npos) << e.what();
  }
  try {
    (void)tier.lend_blocks(1, 5, 0, 1);
    ADD_FAILURE() << "no error for a bad layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc

// LayerStreamer: each chunk a verify pass acquires holds the tier's positions and
// the pass's own rows, byte for byte the same whether it was borrowed from the host
// tier in place (FullTier::lend_blocks: whole blocks below the pass's rows, in one
// of the tier's chunks) or staged (the disk tier, a host tier whose chunks do not
// line up with the streamer's); and borrowed only where none of the pass's rows
// fall, with the host tier sized by host_tier_chunk_blocks lending every such chunk.
#include "runtime/layer_streamer.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

namespace vc {
namespace {

constexpr size_t kFull = 37, kRows = 5, kChunkPositions = 8;

// 2 layers, 2 KV heads of 16 dims, blocks of 4 positions, bf16.
KvCacheConfig config() { return KvCacheConfig{2, 2, 16, 4, 64, DType::bf16, false}; }

struct PassBytes {
  std::vector<std::vector<std::byte>> chunks;  // per (layer, chunk): K then V of each position
  size_t lent = 0, streamed = 0;
};

// One verify pass over request 1 of `tier` (kFull positions held, kRows rows),
// every chunk's positions read out through its block table.
PassBytes run_pass(FullTier& tier) {
  const KvCacheConfig c = tier.config();
  const size_t row = c.head_dim * dtype_size(c.dtype);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  auto roll = [&] {
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
  };
  tier.create(1);
  for (size_t p = 0; p < kFull; ++p)
    for (size_t l = 0; l < c.num_layers; ++l) roll(), tier.write(1, l, p, k.data(), v.data());
  LayerStreamer streamer(tier, kChunkPositions);
  streamer.start(1, kFull, kRows);
  PassBytes out;
  for (size_t l = 0; l < c.num_layers; ++l) {
    for (size_t p = kFull; p < kFull + kRows; ++p) roll(), streamer.write(l, p, k.data(), v.data());
    for (size_t ch = 0; ch < streamer.chunks(); ++ch) {
      const KvChunk chunk = streamer.acquire(l, ch);
      std::vector<std::byte> bytes;
      const size_t end = std::min(chunk.block_end * c.block_tokens, kFull + kRows);
      for (size_t p = chunk.block_begin * c.block_tokens; p < end; ++p)
        for (size_t h = 0; h < c.kv_heads; ++h) {
          const size_t slot = size_t(chunk.kv.block_table[p / c.block_tokens]);
          const size_t off = ((slot * c.kv_heads + h) * c.block_tokens + p % c.block_tokens) * row;
          const auto* kb = static_cast<const std::byte*>(chunk.kv.k) + off;
          const auto* vb = static_cast<const std::byte*>(chunk.kv.v) + off;
          bytes.insert(bytes.end(), kb, kb + row);
          bytes.insert(bytes.end(), vb, vb + row);
        }
      streamer.release(l, ch);
      out.chunks.push_back(std::move(bytes));
    }
  }
  out.lent = streamer.chunks_lent();
  out.streamed = streamer.bytes_streamed();
  tier.release(1);
  return out;
}

TEST(layer_streamer, borrowed_and_staged_chunks_hold_the_same_bytes) {
  const KvCacheConfig c = config();
  char tmpl[] = "/tmp/vc-streamer-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  PassBytes disk;
  {
    DiskFullTier tier(c, tmpl);
    disk = run_pass(tier);
  }
  std::filesystem::remove_all(tmpl);
  HostFullTier aligned(c, LayerStreamer::host_tier_chunk_blocks(kChunkPositions, c.block_tokens));
  HostFullTier misaligned(c, /*chunk_blocks=*/3);
  const PassBytes a = run_pass(aligned), m = run_pass(misaligned);

  // 11 blocks in chunks of 2: chunks 0-3 end at or below position 37 (the first row).
  EXPECT_EQ(disk.lent, 0u);
  EXPECT_EQ(a.lent, 4u * c.num_layers) << "every chunk below the rows, borrowed";
  EXPECT_EQ(m.lent, 3u * c.num_layers) << "chunk 1 (blocks 2-3) spans two of the tier's chunks";
  ASSERT_EQ(a.chunks.size(), disk.chunks.size());
  ASSERT_EQ(m.chunks.size(), disk.chunks.size());
  for (size_t i = 0; i < disk.chunks.size(); ++i) {
    EXPECT_EQ(a.chunks[i], disk.chunks[i]) << "chunk " << i << ", aligned host tier";
    EXPECT_EQ(m.chunks[i], disk.chunks[i]) << "chunk " << i << ", misaligned host tier";
  }
  EXPECT_EQ(a.streamed, disk.streamed) << "borrowed bytes count as streamed";
  EXPECT_EQ(m.streamed, disk.streamed);
}

}  // namespace
}  // namespace vc

// StagingRing (runtime/staging_ring.hpp): where a chunked verify pass on a device
// puts each KV block and which attention chunks each arrival completes.
#include "runtime/staging_ring.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace vc {
namespace {

TEST(staging_ring, blocks_in_position_order_complete_their_chunks_in_order_and_reuse_slots) {
  StagingRing ring(/*total_blocks=*/10, /*chunk_blocks=*/4, /*ring_chunks=*/2);
  EXPECT_EQ(ring.chunks(), 3u);  // 4 + 4 + 2 blocks
  EXPECT_EQ(ring.slots(), 8u);
  EXPECT_EQ(ring.slot(9), 1u);
  for (size_t b = 0; b < 3; ++b) EXPECT_EQ(ring.stage(b), 0u) << "chunk 0 is not complete yet";
  EXPECT_EQ(ring.stage(3), 1u);
  ring.launched_upto(1);
  for (size_t b = 4; b < 7; ++b) EXPECT_EQ(ring.stage(b), 1u);
  EXPECT_EQ(ring.stage(7), 2u);
  // Block 8 takes block 0's slot: chunk 0 was launched, so it may.
  EXPECT_EQ(ring.stage(8), 2u);
  EXPECT_EQ(ring.stage(9), 3u) << "the last chunk is short";
  ring.launched_upto(3);
  EXPECT_TRUE(ring.staged(9));
  EXPECT_FALSE(ring.staged(10));
}

TEST(staging_ring, a_block_that_would_overwrite_a_chunk_not_yet_launched_is_an_error) {
  StagingRing ring(12, 4, 2);
  for (size_t b = 0; b < 8; ++b) (void)ring.stage(b);  // chunks 0 and 1 complete, none launched
  EXPECT_THROW((void)ring.stage(8), Error) << "block 8 needs chunk 0's slots";
  ring.launched_upto(1);
  EXPECT_NO_THROW((void)ring.stage(8));
  EXPECT_THROW((void)ring.stage(8), Error) << "a block added twice";
  EXPECT_THROW((void)ring.stage(12), Error) << "past the pass";
}

TEST(staging_ring, blocks_out_of_order_within_the_ring_are_taken_and_complete_chunks_in_order) {
  StagingRing ring(8, 4, 2);
  EXPECT_EQ(ring.stage(5), 0u);
  EXPECT_EQ(ring.stage(4), 0u);
  EXPECT_EQ(ring.stage(6), 0u);
  EXPECT_EQ(ring.stage(7), 0u) << "chunk 1 is complete, chunk 0 is not: nothing launches";
  for (size_t b = 0; b < 3; ++b) EXPECT_EQ(ring.stage(b), 0u);
  EXPECT_EQ(ring.stage(3), 2u) << "block 3 completes chunk 0, and chunk 1 follows it";
  EXPECT_EQ(ring.launched(), 0u) << "launching is the caller's";
}

TEST(staging_ring, a_ring_of_zero_or_more_chunks_than_the_pass_gives_every_block_its_own_slot) {
  const StagingRing whole(7, 4, 0), large(7, 4, 9);
  EXPECT_EQ(whole.slots(), 8u);
  EXPECT_EQ(large.slots(), 8u);
  StagingRing ring(7, 4, 0);
  for (size_t b = 7; b-- > 0;) (void)ring.stage(b);  // any order
  EXPECT_EQ(ring.launched(), 0u);
}

}  // namespace
}  // namespace vc

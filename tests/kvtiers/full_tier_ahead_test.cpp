// A run of blocks written ahead of a request's prefill (FullTier::write_blocks_ahead,
// join_ahead, drop_ahead), on the host and the disk tier: the chunks a back fetch
// brings from the last one down go into the entry above the front and become its
// positions where the two meet, bit for bit as appending them in order would.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "tests/error_naming.hpp"
#include "tests/kvtiers/remote_tier_support.hpp"

namespace vc {
namespace {

using test::expect_error_naming;
using test::layer_bytes;

struct full_tier_ahead : ::testing::TestWithParam<bool> {  // true: the disk tier
  std::string dir;
  std::unique_ptr<FullTier> src, dst;
  size_t bpt = 0;  // bytes per token
  void SetUp() override {
    char tmpl[] = "/tmp/vc-tier-ahead-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    src = std::make_unique<HostFullTier>(test::small_kv());
    dst = GetParam() ? std::unique_ptr<FullTier>(std::make_unique<DiskFullTier>(test::small_kv(), dir))
                     : std::make_unique<HostFullTier>(test::small_kv(), /*chunk_blocks=*/2);
    test::fill(*src, 1, 48);
    bpt = dst->bytes_per_token();
  }
  void TearDown() override {
    dst.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  // Blocks [b, b + n) of every layer of the source, as write_blocks_ahead takes them.
  void write_ahead(uint64_t id, size_t b, size_t n) {
    std::vector<std::vector<std::byte>> k(2), v(2);
    std::vector<const std::byte*> kp, vp;
    for (size_t l = 0; l < 2; ++l) {
      k[l].resize(src->staging_bytes(n * 4));
      v[l].resize(k[l].size());
      src->read_blocks(1, l, b, n, k[l].data(), v[l].data());
      kp.push_back(k[l].data());
      vp.push_back(v[l].data());
    }
    dst->write_blocks_ahead(id, b, n, kp, vp);
  }
  // The front: blocks [b, b + n) appended to every layer.
  void append(uint64_t id, size_t b, size_t n) {
    std::vector<std::byte> k(src->staging_bytes(n * 4)), v(k.size());
    for (size_t l = 0; l < 2; ++l) {
      src->read_blocks(1, l, b, n, k.data(), v.data());
      dst->write_blocks(id, l, b, n, k.data(), v.data());
    }
  }
  void expect_source_bits(uint64_t id, size_t n) {
    ASSERT_EQ(dst->length(id), n);
    for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(*dst, id, l, n), layer_bytes(*src, 1, l, n)) << "layer " << l;
  }
};

TEST_P(full_tier_ahead, a_run_written_from_the_top_down_joins_the_front_with_the_bits_of_appending_in_order) {
  dst->create(7);  // no size hint
  write_ahead(7, 8, 2);  // positions [32, 40), then [24, 32) below them
  write_ahead(7, 6, 2);
  EXPECT_EQ(dst->ahead(7), (std::pair<size_t, size_t>{24, 40}));
  EXPECT_EQ(dst->length(7), 0u) << "the run is not the request's until it is joined";
  EXPECT_EQ(dst->bytes_held(7), 40 * bpt) << "but it is held";
  EXPECT_EQ(dst->bytes_held_total(), 40 * bpt);
  append(7, 0, 6);  // the front, up to the run
  EXPECT_EQ(dst->length(7), 24u);
  dst->join_ahead(7, 40);
  EXPECT_EQ(dst->ahead(7), (std::pair<size_t, size_t>{0, 0}));
  expect_source_bits(7, 40);
  append(7, 10, 2);  // decoding goes on past it
  expect_source_bits(7, 48);
}

TEST_P(full_tier_ahead, a_join_keeps_what_the_front_rewrote_inside_the_run_and_drops_the_run_past_its_end) {
  dst->create(8, 48);
  const size_t allocated = GetParam() ? 0 : static_cast<HostFullTier&>(*dst).bytes_allocated();
  write_ahead(8, 4, 6);  // positions [16, 40)
  append(8, 0, 6);       // a rank whose front went on into its run: to 24
  dst->join_ahead(8, 32);
  expect_source_bits(8, 32);
  EXPECT_EQ(dst->bytes_held(8), 32 * bpt) << "the run past 32 is gone";
  if (!GetParam()) {
    EXPECT_EQ(static_cast<HostFullTier&>(*dst).bytes_allocated(), allocated)
        << "the storage the request was created with stays (the prefill rewrites it)";
  }
  append(8, 8, 2);  // written again from the front, as the prefill of the rest would
  expect_source_bits(8, 40);
}

TEST_P(full_tier_ahead, a_position_written_into_a_block_of_the_run_keeps_the_rest_of_the_block) {
  dst->create(12, 48);
  write_ahead(12, 4, 6);  // positions [16, 40)
  append(12, 0, 4);       // the front, to 16
  // A rank's front going on into its run one position at a time (write(), as a
  // decode step writes): 16 and 17, in the run's first block. The disk tier holds
  // one block per layer in memory; it must read the run's block back first.
  std::vector<std::byte> k(src->staging_bytes(4)), v(k.size());
  std::vector<float> kr(2 * 8), vr(kr.size());
  for (size_t p = 16; p < 18; ++p)
    for (size_t l = 0; l < 2; ++l) {
      src->read_blocks(1, l, 4, 1, k.data(), v.data());  // block 4: [kv_heads, 4 positions, 8]
      for (size_t h = 0; h < 2; ++h)
        for (size_t d = 0; d < 8; ++d) {
          const size_t at = ((h * 4 + p - 16) * 8 + d) * 2;  // bf16
          const uint32_t kb = uint32_t(uint8_t(k[at])) | uint32_t(uint8_t(k[at + 1])) << 8;
          const uint32_t vb = uint32_t(uint8_t(v[at])) | uint32_t(uint8_t(v[at + 1])) << 8;
          const uint32_t kf = kb << 16, vf = vb << 16;
          std::memcpy(&kr[h * 8 + d], &kf, 4);
          std::memcpy(&vr[h * 8 + d], &vf, 4);
        }
      dst->write(12, l, p, kr.data(), vr.data());
    }
  dst->join_ahead(12, 40);
  expect_source_bits(12, 40);  // 18-19 came from the run, read back around the writes
}

TEST_P(full_tier_ahead, a_run_that_lies_below_the_front_or_leaves_a_gap_is_refused_and_nothing_changes) {
  dst->create(9, 48);
  append(9, 0, 2);  // 8 positions
  expect_error_naming([&] { write_ahead(9, 1, 2); }, "already holds 8 positions");
  expect_error_naming([&] { dst->join_ahead(9, 8); }, "no run was written ahead");
  write_ahead(9, 6, 2);  // [24, 32)
  // [12, 20): not down to 24
  expect_error_naming([&] { write_ahead(9, 3, 2); },
                      "write_blocks_ahead of positions [12, 20) does not end where the run written ahead begins (24)");
  expect_error_naming([&] { write_ahead(9, 3, 2); }, "request 9");
  expect_error_naming([&] { dst->join_ahead(9, 32); }, "holds 8 positions, short of the run written ahead from 24");
  append(9, 2, 4);
  expect_error_naming([&] { dst->join_ahead(9, 36); }, "ends at 32");
  EXPECT_EQ(dst->ahead(9), (std::pair<size_t, size_t>{24, 32})) << "every refusal left the run as it was";
  dst->join_ahead(9, 32);
  expect_source_bits(9, 32);
}

TEST_P(full_tier_ahead, the_budget_counts_the_run_and_drop_or_truncate_gives_it_back) {
  dst->set_capacity_bytes(40 * bpt);
  dst->create(10, 48);
  expect_error_naming([&] { write_ahead(10, 8, 4); }, "budget");  // to 48 positions
  write_ahead(10, 8, 2);  // to 40: within it
  EXPECT_EQ(dst->bytes_held_total(), 40 * bpt);
  dst->create(11);
  expect_error_naming([&] { append(11, 0, 1); }, "budget");  // the run's 40 positions fill it
  dst->drop_ahead(10);
  EXPECT_EQ(dst->bytes_held_total(), 0u);
  EXPECT_EQ(dst->ahead(10), (std::pair<size_t, size_t>{0, 0}));
  dst->drop_ahead(10);  // none: nothing to do
  append(10, 0, 2);
  write_ahead(10, 4, 2);
  dst->truncate(10, 4);  // a rollback below the run forgets it
  EXPECT_EQ(dst->ahead(10), (std::pair<size_t, size_t>{0, 0}));
  EXPECT_EQ(dst->bytes_held_total(), 4 * bpt);
  expect_source_bits(10, 4);
}

INSTANTIATE_TEST_SUITE_P(tiers, full_tier_ahead, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "disk" : "host"; });

}  // namespace
}  // namespace vc

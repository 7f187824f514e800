// FastMemory: charges fit the capacity or fail naming the sizes; peaks; charges
// owned by FastCharge come back when it goes; the paged cache charges its blocks.
#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "kvtiers/fast_memory.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/paged_kv_cache.hpp"

namespace vc {
namespace {

TEST(fast_memory, charges_fit_the_capacity_or_fail_naming_what_and_the_sizes) {
  FastMemory m(1000);
  m.charge(600, "a view");
  EXPECT_TRUE(m.try_charge(400));
  EXPECT_FALSE(m.try_charge(1));
  try {
    m.charge(5, "a KV block");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("a KV block needs 5 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1000 B of 1000 B are in use"), std::string::npos) << msg;
  }
  m.release(700);
  EXPECT_EQ(m.used(), 300u);
  EXPECT_EQ(m.peak(), 1000u);
  m.reset_peak();
  EXPECT_EQ(m.peak(), 300u);
  FastMemory unlimited;
  unlimited.charge(size_t(1) << 40, "anything");
  EXPECT_EQ(unlimited.used(), size_t(1) << 40);
}

TEST(fast_memory, a_charge_is_returned_when_its_owner_goes_or_shrinks) {
  FastMemory m(100);
  {
    FastCharge c(&m, 60, "x");
    EXPECT_EQ(m.used(), 60u);
    c.resize(20, "x");
    EXPECT_EQ(m.used(), 20u);
    EXPECT_THROW(c.resize(101, "x"), Error);
    EXPECT_EQ(m.used(), 20u);
    FastCharge moved = std::move(c);
    EXPECT_EQ(m.used(), 20u);
  }
  EXPECT_EQ(m.used(), 0u);
}

TEST(fast_memory, the_paged_cache_charges_blocks_until_they_are_free_again) {
  KvCacheConfig c{2, 2, 8, 4, 64, DType::bf16, true};
  PagedKvCache cache(c);
  FastMemory m(3 * cache.block_bytes());
  cache.set_budget(&m);
  KvSequence a, b;
  cache.reserve(a, 8);  // two blocks
  EXPECT_EQ(m.used(), 2 * cache.block_bytes());
  EXPECT_THROW(cache.reserve(b, 8), Error);  // the second block would pass the budget
  EXPECT_EQ(m.used(), 3 * cache.block_bytes());
  cache.free(b);
  cache.free(a);
  EXPECT_EQ(m.used(), 0u);
  EXPECT_EQ(cache.pool().used_blocks(), 0u);
}

}  // namespace
}  // namespace vc

namespace vc {
namespace {

TEST(full_tier_budget, growth_past_the_tiers_budget_fails_naming_the_sizes_and_keeps_what_it_held) {
  KvCacheConfig c{2, 2, 8, 4, 64, DType::bf16, true};
  HostFullTier tier(c);
  tier.set_capacity_bytes(10 * tier.bytes_per_token());
  std::vector<float> row(c.kv_heads * c.head_dim, 0.25f);
  tier.create(1);
  tier.create(2);
  for (size_t p = 0; p < 6; ++p)
    for (size_t l = 0; l < 2; ++l) tier.write(1, l, p, row.data(), row.data());
  for (size_t p = 0; p < 4; ++p)
    for (size_t l = 0; l < 2; ++l) tier.write(2, l, p, row.data(), row.data());
  try {
    tier.write(2, 0, 4, row.data(), row.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tier.length(2), 4u);
  tier.write(1, 1, 5, row.data(), row.data());  // overwriting held positions is fine
  tier.release(1);
  tier.write(2, 0, 4, row.data(), row.data());  // room again
  EXPECT_EQ(tier.length(2), 5u);
}

}  // namespace
}  // namespace vc

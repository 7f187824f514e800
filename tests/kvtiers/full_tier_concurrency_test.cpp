// The full tier is shared by the drafter (admission, release), the mover (commits,
// release) and the mover's copy thread (layer reads): its operations must be safe
// from several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kvtiers/full_tier.hpp"

namespace vc {
namespace {

KvCacheConfig small() {
  KvCacheConfig c;
  c.num_layers = 2;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.block_tokens = 4;
  c.num_blocks = 1;
  c.dtype = DType::bf16;
  return c;
}

TEST(full_tier, release_if_present_frees_once_when_two_owners_release_together) {
  HostFullTier tier(small());
  std::vector<float> row(16, 1.0f);
  for (int round = 0; round < 200; ++round) {
    tier.create(7);
    for (size_t l = 0; l < 2; ++l) tier.write(7, l, 0, row.data(), row.data());
    std::atomic<int> freed{0};
    std::thread a([&] { freed += tier.release_if_present(7); });
    std::thread b([&] { freed += tier.release_if_present(7); });
    a.join();
    b.join();
    ASSERT_EQ(freed.load(), 1) << "round " << round;
    ASSERT_FALSE(tier.contains(7));
  }
  EXPECT_FALSE(tier.release_if_present(99));
}

TEST(full_tier, reads_of_one_request_and_writes_of_another_can_run_at_once) {
  HostFullTier tier(small());
  std::vector<float> row(16, 0.5f);
  tier.create(1);
  for (size_t p = 0; p < 64; ++p)
    for (size_t l = 0; l < 2; ++l) tier.write(1, l, p, row.data(), row.data());
  tier.create(2);
  KvStaging staging(small());
  std::thread reader([&] {
    for (int i = 0; i < 500; ++i) tier.read_layer(1, size_t(i % 2), 64, staging);
  });
  for (size_t p = 0; p < 500; ++p)
    for (size_t l = 0; l < 2; ++l) tier.write(2, l, p, row.data(), row.data());
  reader.join();
  EXPECT_EQ(tier.length(2), 500u);
  EXPECT_EQ(tier.length(1), 64u);
}

}  // namespace
}  // namespace vc

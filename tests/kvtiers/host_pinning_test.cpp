// kvtiers/host_pinning.hpp: the staging buffers verify passes read full-tier chunks
// into, and the host tier's own chunks (which it lends to passes in place), are
// offered to the installed pinner when allocated (grown, replaced) and taken back
// before they are freed, each by the pinner that took it -- a lent chunk only once
// its last loan is returned; with none installed nothing is offered, and the tiers
// work the same either way.
#include "kvtiers/host_pinning.hpp"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "kvtiers/full_tier.hpp"

namespace vc {
namespace {

class RecordingPinner final : public HostPinner {
 public:
  std::mutex mu;
  std::map<void*, size_t> live;  // pinned and not yet unpinned
  size_t pins = 0, unpins = 0, unknown_unpins = 0;
  void pin(void* p, size_t bytes) noexcept override {
    std::lock_guard lock(mu);
    live[p] = bytes;
    ++pins;
  }
  void unpin(void* p) noexcept override {
    std::lock_guard lock(mu);
    if (live.erase(p) == 0) ++unknown_unpins;
    ++unpins;
  }
};

// Installs a pinner for the test's scope, restoring what was there.
struct Installed {
  std::shared_ptr<HostPinner> before;
  explicit Installed(std::shared_ptr<HostPinner> p) : before(install_host_pinner(std::move(p))) {}
  ~Installed() { install_host_pinner(before); }
};

KvCacheConfig config() { return KvCacheConfig{2, 2, 16, 16, 64, DType::bf16, false}; }

TEST(host_pinning, staging_buffers_are_pinned_while_they_live_and_unpinned_before_they_are_freed) {
  auto pinner = std::make_shared<RecordingPinner>();
  {
    Installed scope(pinner);
    KvStaging staging(config());
    staging.reserve(40);  // K and V: 3 blocks of 16 positions
    ASSERT_EQ(pinner->live.size(), 2u);
    EXPECT_EQ(pinner->live.count(staging.k()), 1u);
    EXPECT_EQ(pinner->live.count(staging.v()), 1u);
    EXPECT_GE(pinner->live.at(staging.k()), 3u * 2 * 16 * 16 * 2);
    void* old_k = staging.k();
    staging.reserve(400);  // grows: new buffers pinned, the old ones unpinned
    EXPECT_EQ(pinner->live.size(), 2u);
    EXPECT_EQ(pinner->live.count(staging.k()), 1u);
    EXPECT_EQ(pinner->live.count(old_k), old_k == staging.k() ? 1u : 0u);
    staging = KvStaging(config());  // replaced by an empty one (as the streamer does)
    EXPECT_TRUE(pinner->live.empty());
    staging.reserve(16);
    EXPECT_EQ(pinner->live.size(), 2u);
  }
  EXPECT_TRUE(pinner->live.empty()) << "every pinned buffer was unpinned before its free";
  EXPECT_EQ(pinner->pins, 6u);
  EXPECT_EQ(pinner->unknown_unpins, 0u);
}

TEST(host_pinning, a_buffer_goes_back_to_the_pinner_that_took_it_and_none_is_offered_without_one) {
  auto first = std::make_shared<RecordingPinner>();
  auto second = std::make_shared<RecordingPinner>();
  ASSERT_EQ(host_pinner(), nullptr);
  KvStaging unpinned(config());
  unpinned.reserve(16);  // no pinner: nothing offered
  {
    Installed one(first);
    KvStaging a(config());
    a.reserve(16);
    {
      Installed two(second);
      unpinned = KvStaging(config());  // freed: never offered, so no unpin anywhere
      a = KvStaging(config());         // freed: back to `first`, which pinned it
      EXPECT_EQ(second->unpins, 0u);
    }
    EXPECT_EQ(first->unpins, 2u);
    EXPECT_TRUE(first->live.empty());
  }
  EXPECT_EQ(host_pinner(), nullptr);
  EXPECT_EQ(first->unknown_unpins + second->unknown_unpins, 0u);
}

TEST(host_pinning, a_full_tier_reads_the_same_bytes_into_pinned_staging) {
  // The host tier, written and read back a chunk at a time into staging, with and
  // without a pinner: the same bytes (pinning changes where nothing is read from).
  auto read_back = [](bool pinned) {
    std::shared_ptr<RecordingPinner> pinner = pinned ? std::make_shared<RecordingPinner>() : nullptr;
    Installed scope(pinner);
    HostFullTier tier(config());
    tier.create(7);
    std::vector<float> k(2 * 16), v(2 * 16);
    for (size_t pos = 0; pos < 40; ++pos)
      for (size_t l = 0; l < 2; ++l) {
        for (size_t i = 0; i < k.size(); ++i) k[i] = float(pos * 100 + l * 10 + i), v[i] = -k[i];
        tier.write(7, l, pos, k.data(), v.data());
      }
    KvStaging staging(config());
    tier.read_layer(7, 1, 40, staging);
    if (pinned) {
      EXPECT_EQ(pinner->live.count(staging.k()), 1u);
    }
    const auto* kb = static_cast<const std::byte*>(staging.k());
    std::vector<std::byte> bytes(kb, kb + 2 * 2 * 16 * 16 * 2);  // the two full blocks
    tier.release(7);
    return bytes;
  };
  EXPECT_EQ(read_back(true), read_back(false));
}

TEST(host_pinning, the_host_tiers_chunks_are_pinned_while_held_or_lent_and_unpinned_before_their_free) {
  auto pinner = std::make_shared<RecordingPinner>();
  Installed scope(pinner);
  const KvCacheConfig c = config();  // 16 positions per block
  HostFullTier tier(c, /*chunk_blocks=*/2);
  tier.create(5);
  std::vector<float> k(2 * 16, 1.f), v(2 * 16, -1.f);
  for (size_t pos = 0; pos < 64; ++pos)  // 4 blocks: 2 chunks
    for (size_t l = 0; l < 2; ++l) tier.write(5, l, pos, k.data(), v.data());
  EXPECT_EQ(pinner->live.size(), 2u) << "one pin per chunk";
  for (const auto& [p, bytes] : pinner->live) EXPECT_EQ(bytes, tier.bytes_allocated() / 2);
  {
    ASSERT_TRUE(tier.lend_blocks(5, 1, 2, 2).has_value());
    const FullTier::LentBlocks lent = tier.lend_blocks(5, 1, 2, 2).value();  // the second chunk
    tier.release(5);
    EXPECT_EQ(pinner->live.size(), 1u) << "the lent chunk stays pinned while lent";
    EXPECT_NE(lent.k, nullptr);
  }
  EXPECT_TRUE(pinner->live.empty());
  EXPECT_EQ(pinner->pins, 2u);
  EXPECT_EQ(pinner->unknown_unpins, 0u);
}

}  // namespace
}  // namespace vc

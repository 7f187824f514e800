// RemoteTier::fetch_back (and append_back_chunks) against a real redis-server: a cached prefix's full chunks
// fetched from the last one down, checked as fetch_prefix checks them, stopped where
// the caller's own prefill has reached, and appended to a tier bit for bit; a
// missing or corrupt chunk ends the run above it, a store that is down yields none.
#include <gtest/gtest.h>

#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/chunk_key.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/kvtiers/remote_tier_support.hpp"

namespace vc {
namespace {

using test::layer_bytes;

// fetch_back with the chunks' values kept, ascending, as a caller holding them
// would: `wanted(c)` says whether chunk c is taken.
RemoteBackFetch fetch_kept(RemoteTier& r, std::span<const int32_t> prompt, size_t max_positions,
                           const std::function<bool(size_t)>& wanted) {
  std::vector<std::pair<std::string, size_t>> down;
  RemoteBackFetch b = r.fetch_back(prompt, max_positions, [&](size_t c, std::string&& value, size_t offset) {
    if (!wanted(c)) return false;
    down.emplace_back(std::move(value), offset);
    return true;
  });
  b.values.assign(down.rbegin(), down.rend());
  return b;
}

struct remote_back_fetch : ::testing::Test {
  test::RedisServer server;
  HostFullTier src{test::small_kv()}, dst{test::small_kv()};
  std::vector<int32_t> prompt = test::tokens(44);  // 5 whole chunks of 8, 4 tokens left
  void SetUp() override {
    if (!server.available()) GTEST_SKIP() << server.reason();
    test::fill(src, 1, prompt.size());
  }
  void publish_all(RemoteTier& r) {
    EXPECT_EQ(r.publish(prompt, 0, src, 1), 5u);
    r.flush();
    EXPECT_EQ(r.publish_stats().sent, 5u);
  }
  // Request `id` of dst with src's first `chunks` chunks written locally, as a
  // caller's own prefill would.
  void front(uint64_t id, size_t chunks) {
    dst.create(id);
    std::vector<std::byte> k(src.staging_bytes(chunks * 8)), v(k.size());
    for (size_t l = 0; l < 2; ++l) {
      if (chunks == 0) break;
      static_cast<FullTier&>(src).read_blocks(1, l, 0, chunks * 2, k.data(), v.data());
      static_cast<FullTier&>(dst).write_blocks(id, l, 0, chunks * 2, k.data(), v.data());
    }
  }
  RedisClient raw() { return RedisClient(parse_redis_url(server.url())); }
  std::string key(RemoteTier& r, size_t c) { return full_chunk_key(chunk_keys(r.layout(), prompt)[c]); }
};

TEST_F(remote_back_fetch, every_chunk_comes_from_the_last_down_and_appends_bit_for_bit) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  publish_all(r);
  std::vector<size_t> asked;
  const RemoteBackFetch b = fetch_kept(r, prompt, prompt.size() - 1, [&](size_t c) {
    asked.push_back(c);
    return true;
  });
  EXPECT_EQ(asked, (std::vector<size_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(b.first, 0u);
  EXPECT_EQ(b.end, 5u);
  EXPECT_EQ(b.values.size(), 5u);
  EXPECT_EQ(b.failed_at, 5u) << "none failed";
  EXPECT_GT(b.bytes, 40 * dst.bytes_per_token());
  front(5, 0);
  append_back_chunks(r.layout(), b, 0, dst, 5);
  ASSERT_EQ(dst.length(5), 40u);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 5, l, 40), layer_bytes(src, 1, l, 40)) << "layer " << l;
  // The limit is honoured in whole chunks.
  EXPECT_EQ(fetch_kept(r, prompt, 3 * 8 + 5, [](size_t) { return true; }).end, 3u);
}

TEST_F(remote_back_fetch, the_run_stops_where_the_callers_prefill_has_reached_and_joins_it) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  publish_all(r);
  // The caller has computed chunks 0-1 itself: the run takes 4, 3, 2 and stops.
  const RemoteBackFetch b = fetch_kept(r, prompt, prompt.size() - 1, [](size_t c) { return c >= 2; });
  EXPECT_EQ(b.first, 2u);
  EXPECT_EQ(b.end, 5u);
  EXPECT_EQ(b.stop_reason, "") << "meeting the caller is no fault";
  EXPECT_EQ(b.failed_at, 5u);
  front(6, 2);
  append_back_chunks(r.layout(), b, 2, dst, 6);
  ASSERT_EQ(dst.length(6), 40u);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 6, l, 40), layer_bytes(src, 1, l, 40)) << "layer " << l;
  // From a chunk past the run's first (the caller also computed chunk 2).
  front(7, 3);
  append_back_chunks(r.layout(), b, 3, dst, 7);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 7, l, 40), layer_bytes(src, 1, l, 40)) << "layer " << l;
  // Below the run, or onto an entry of another length: an error, nothing written.
  front(8, 1);
  EXPECT_THROW(append_back_chunks(r.layout(), b, 1, dst, 8), Error);
  EXPECT_THROW(append_back_chunks(r.layout(), b, 3, dst, 8), Error);
  EXPECT_EQ(dst.length(8), 8u);
}

TEST_F(remote_back_fetch, a_missing_or_corrupt_chunk_ends_the_run_above_it) {
  RemoteTier r(test::remote_cfg(server.url()), test::small_kv(), 99);
  publish_all(r);
  RedisClient c = raw();
  // Chunk 3 missing: the cached prefix ends there, the run is [0, 3).
  const std::string held = c.command({"GET", key(r, 3)}).str;
  EXPECT_EQ(c.command({"DEL", key(r, 3)}).integer, 1);
  RemoteBackFetch b = fetch_kept(r, prompt, prompt.size() - 1, [](size_t) { return true; });
  EXPECT_EQ(b.end, 3u);
  EXPECT_EQ(b.first, 0u);
  EXPECT_NE(b.stop_reason.find("chunk 3 not in the store"), std::string::npos) << b.stop_reason;
  EXPECT_EQ(c.command({"SET", key(r, 3), held}).str, "OK");
  // Chunk 1 corrupt: the run from the back ends above it, [2, 5).
  std::string v = c.command({"GET", key(r, 1)}).str;
  v[v.size() / 2] ^= 0x10;
  EXPECT_EQ(c.command({"SET", key(r, 1), v}).str, "OK");
  b = fetch_kept(r, prompt, prompt.size() - 1, [](size_t) { return true; });
  EXPECT_EQ(b.end, 5u);
  EXPECT_EQ(b.first, 2u);
  EXPECT_NE(b.stop_reason.find("checksum mismatch"), std::string::npos) << b.stop_reason;
  EXPECT_NE(b.stop_reason.find("chunk 1 rejected"), std::string::npos)
      << "the chunk's number, not its place in the fetch from the back: " << b.stop_reason;
  EXPECT_EQ(b.failed_at, 1u);
  front(9, 2);
  append_back_chunks(r.layout(), b, 2, dst, 9);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 9, l, 40), layer_bytes(src, 1, l, 40)) << "layer " << l;
}

TEST_F(remote_back_fetch, a_store_that_is_down_yields_no_chunk_and_says_why) {
  RemoteTierConfig cfg = test::remote_cfg(server.url());
  cfg.timeouts.connect = cfg.timeouts.io = std::chrono::milliseconds(300);
  RemoteTier r(cfg, test::small_kv(), 99);
  publish_all(r);
  server.kill();
  const RemoteBackFetch b = fetch_kept(r, prompt, prompt.size() - 1, [](size_t) { return true; });
  EXPECT_EQ(b.end, 0u);
  EXPECT_EQ(b.first, 0u);
  EXPECT_TRUE(b.values.empty());
  EXPECT_FALSE(b.stop_reason.empty());
}

}  // namespace
}  // namespace vc

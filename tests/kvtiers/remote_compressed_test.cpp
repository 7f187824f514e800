// Compressed chunks in a real redis-server: a view published chunk by chunk comes
// back joined, bit for bit; every fault (another compressor spec, a missing chunk,
// a flipped bit, another format version, another key's value, a store that is
// down) ends the compressed prefix at the last good chunk, with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/layer_compression.hpp"
#include "kvtiers/remote/chunk_key.hpp"
#include "kvtiers/remote/chunk_value.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace vc {
namespace {

constexpr size_t kChunk = 32, kDim = 64, kHeads = 2, kLayers = 2;

KvCacheConfig kv_config() {
  KvCacheConfig c;
  c.num_layers = kLayers;
  c.kv_heads = kHeads;
  c.head_dim = kDim;
  c.block_tokens = 16;
  c.num_blocks = 64;
  return c;
}

struct remote_compressed : ::testing::Test {
  test::RedisServer server;
  std::vector<int32_t> prompt;   // 3 whole chunks and 9 tokens more
  CompressedView view;           // KIVI (2 bits, groups of 16) of the prompt's KV
  std::string spec = compressor_spec("kivi", {{"group_size", 16}}, 4.0);

  void SetUp() override {
    if (!server.available()) GTEST_SKIP() << server.reason();
    const size_t n = 3 * kChunk + 9;
    for (size_t i = 0; i < n; ++i) prompt.push_back(int32_t(5 + i * 37 % 101));
    std::mt19937 rng(11);
    std::normal_distribution<float> d;
    KvSnapshot kv{kLayers, kHeads, kDim, n, {}, {}};
    kv.k.resize(kLayers * kHeads * n * kDim);
    kv.v.resize(kv.k.size());
    for (float& x : kv.k) x = d(rng);
    for (float& x : kv.v) x = d(rng);
    ModelFacts facts;
    facts.heads = kHeads * 2;
    for (size_t p = 0; p < n; ++p) facts.positions.push_back(int32_t(p));
    auto c = make_compressor("kivi", {{"group_size", 16}});
    view = CompressedView::build(kv, plan_snapshot(*c, kv, {}, facts, 4.0), *c, facts);
  }
  RemoteTierConfig cfg() const {
    RemoteTierConfig r;
    r.url = server.url();
    r.chunk_tokens = kChunk;
    r.timeouts.connect = r.timeouts.io = std::chrono::milliseconds(3000);
    r.fetch_window = 2;
    return r;
  }
  void publish_all(RemoteTier& r) {
    ASSERT_EQ(r.publish_compressed(prompt, 0, view, spec), 3u);
    r.flush();
    EXPECT_EQ(r.publish_stats().sent, 3u);
    EXPECT_EQ(r.publish_stats().compressed_queued, 3u);
  }
  RedisClient raw() { return RedisClient(parse_redis_url(server.url())); }
  std::string key(RemoteTier& r, size_t c) {
    return compressed_chunk_key(chunk_keys(r.layout(), prompt)[c], spec);
  }
};

TEST_F(remote_compressed, a_published_view_comes_back_joined_bit_for_bit) {
  RemoteTier r(cfg(), kv_config(), 42);
  publish_all(r);
  const RemoteCompressedFetch f = r.fetch_compressed(prompt, prompt.size() - 1, spec);
  EXPECT_EQ(f.chunks, 3u);
  EXPECT_EQ(f.positions, 3 * kChunk);
  EXPECT_EQ(f.stop_reason, "");
  ASSERT_TRUE(f.view.has_value());
  std::string why;
  const std::optional<CompressedView> prefix = view.slice(0, 3 * kChunk, why);
  ASSERT_TRUE(prefix.has_value()) << why;
  EXPECT_EQ(f.view->serialize(), prefix->serialize());
  for (size_t l = 0; l < kLayers; ++l)
    for (size_t g = 0; g < kHeads; ++g) {
      const size_t n = f.view->count(l, g);
      ASSERT_EQ(n, 3 * kChunk);
      std::vector<float> a(n * kDim), b(a.size()), wa(view.count(l, g) * kDim), wb(wa.size());
      f.view->decode(l, g, a.data(), b.data());
      view.decode(l, g, wa.data(), wb.data());
      EXPECT_EQ(std::memcmp(a.data(), wa.data(), a.size() * 4), 0);
      EXPECT_EQ(std::memcmp(b.data(), wb.data(), b.size() * 4), 0);
    }
  // The limit is honoured in whole chunks, and the full form is another key.
  EXPECT_EQ(r.fetch_compressed(prompt, 2 * kChunk + 5, spec).chunks, 2u);
  // In segments: chunk 0, then chunks 1-2 from position kChunk, joined, the same bits.
  RemoteCompressedFetch head = r.fetch_compressed(prompt, kChunk, spec);
  RemoteCompressedFetch rest = r.fetch_compressed(prompt, prompt.size() - 1, spec, kChunk);
  ASSERT_EQ(head.chunks, 1u);
  ASSERT_EQ(rest.chunks, 2u) << rest.stop_reason;
  EXPECT_EQ(rest.positions, 3 * kChunk);
  ASSERT_TRUE(head.view && rest.view);
  EXPECT_EQ(rest.view->first(), kChunk);
  ASSERT_TRUE(head.view->append(*rest.view, why)) << why;
  EXPECT_EQ(head.view->serialize(), prefix->serialize());
  EXPECT_THROW((void)r.fetch_compressed(prompt, prompt.size(), spec, kChunk + 1), Error)
      << "a segment must start at a chunk";
  // Counted without reading a value: every chunk, within the limit, up to a gap.
  EXPECT_EQ(r.count_compressed(prompt, prompt.size(), spec), 3u);
  EXPECT_EQ(r.count_compressed(prompt, 2 * kChunk + 5, spec), 2u);
  EXPECT_EQ(r.count_compressed(prompt, prompt.size(), compressor_spec("kivi", {}, 4.0)), 0u);
  RedisClient c = raw();
  ASSERT_EQ(c.command({"DEL", key(r, 1)}).integer, 1);
  EXPECT_EQ(r.count_compressed(prompt, prompt.size(), spec), 1u);
  // Another compressor, other parameters or another ratio find nothing.
  for (const std::string& other : {compressor_spec("kivi", {{"group_size", 16}}, 8.0),
                                   compressor_spec("kivi", {}, 4.0),
                                   compressor_spec("snapkv", {{"group_size", 16}}, 4.0)}) {
    const RemoteCompressedFetch o = r.fetch_compressed(prompt, prompt.size(), other);
    EXPECT_EQ(o.chunks, 0u) << other;
    EXPECT_NE(o.stop_reason.find("chunk 0 not in the store"), std::string::npos) << o.stop_reason;
  }
}

TEST_F(remote_compressed, every_fault_ends_the_compressed_prefix_at_the_last_good_chunk) {
  RemoteTier r(cfg(), kv_config(), 42);
  publish_all(r);
  RedisClient c = raw();
  // A flipped payload bit in chunk 2.
  std::string v = c.command({"GET", key(r, 2)}).str;
  v[v.size() - 3] ^= 0x04;
  EXPECT_EQ(c.command({"SET", key(r, 2), v}).str, "OK");
  RemoteCompressedFetch f = r.fetch_compressed(prompt, prompt.size(), spec);
  EXPECT_EQ(f.chunks, 2u);
  EXPECT_EQ(f.view->covered(), 2 * kChunk);
  EXPECT_NE(f.stop_reason.find("chunk 2 rejected: checksum mismatch"), std::string::npos) << f.stop_reason;

  // Chunk 1 missing (evicted).
  EXPECT_EQ(c.command({"DEL", key(r, 1)}).integer, 1);
  f = r.fetch_compressed(prompt, prompt.size(), spec);
  EXPECT_EQ(f.chunks, 1u);
  EXPECT_NE(f.stop_reason.find("chunk 1 not in the store"), std::string::npos) << f.stop_reason;

  // Chunk 0 written by another format version.
  const std::string good0 = c.command({"GET", key(r, 0)}).str;
  v = good0;
  v[4] = char(kChunkFormatVersion + 1);
  EXPECT_EQ(c.command({"SET", key(r, 0), v}).str, "OK");
  f = r.fetch_compressed(prompt, prompt.size(), spec);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_FALSE(f.view.has_value());
  EXPECT_NE(f.stop_reason.find("format version"), std::string::npos) << f.stop_reason;

  // Chunk 0 holding another key's value (the full form of chunk 0, and the
  // compressed chunk 0 of another spec).
  RemoteTier other_spec(cfg(), kv_config(), 42);
  const std::string spec8 = compressor_spec("kivi", {{"group_size", 16}}, 8.0);
  ASSERT_EQ(other_spec.publish_compressed(prompt, 0, view, spec8), 3u);
  other_spec.flush();
  const std::string foreign =
      c.command({"GET", compressed_chunk_key(chunk_keys(r.layout(), prompt)[0], spec8)}).str;
  ASSERT_FALSE(foreign.empty());
  EXPECT_EQ(c.command({"SET", key(r, 0), foreign}).str, "OK");
  f = r.fetch_compressed(prompt, prompt.size(), spec);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("another key"), std::string::npos) << f.stop_reason;

  // Chunk 0 restored: one chunk again; then the store goes down.
  EXPECT_EQ(c.command({"SET", key(r, 0), good0}).str, "OK");
  EXPECT_EQ(r.fetch_compressed(prompt, prompt.size(), spec).chunks, 1u);
  server.kill();
  f = r.fetch_compressed(prompt, prompt.size(), spec);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("remote store redis://127.0.0.1:"), std::string::npos) << f.stop_reason;
}

TEST_F(remote_compressed, a_view_that_cannot_be_cut_at_a_chunk_is_published_up_to_it) {
  RemoteTier r(cfg(), kv_config(), 42);
  // Groups of 64 rows straddle the cut at 32: nothing is publishable.
  const size_t n = prompt.size();
  KvSnapshot kv{kLayers, kHeads, kDim, n, std::vector<float>(kLayers * kHeads * n * kDim, 0.25f),
                std::vector<float>(kLayers * kHeads * n * kDim, -0.5f)};
  ModelFacts facts;
  facts.heads = kHeads * 2;
  auto c = make_compressor("kivi", {{"group_size", 64}, {"residual", 0}});
  const CompressedView coarse = CompressedView::build(kv, plan_snapshot(*c, kv, {}, facts, 4.0), *c, facts);
  EXPECT_EQ(r.publish_compressed(prompt, 0, coarse, spec), 0u);
  EXPECT_EQ(r.publish_stats().compressed_uncuttable, 3u);
}

}  // namespace
}  // namespace vc

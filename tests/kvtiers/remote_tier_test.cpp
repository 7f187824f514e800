// The remote tier against a real redis-server on a loopback port: chained chunk keys,
// the value header's checks, a published prefix fetched back bit for bit, and each
// store fault (down, paused, flushed, overwritten values, another format version)
// ending the prefix at the last good chunk instead of delivering wrong bytes.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/chunk_key.hpp"
#include "kvtiers/remote/chunk_value.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/kvtiers/remote_tier_support.hpp"
#include "tests/kvtiers/tcp_proxy.hpp"

namespace vc {
namespace {

using test::fill;
using test::layer_bytes;
using test::remote_cfg;
using test::small_kv;
using test::tokens;


TEST(chunk_keys, chain_on_the_previous_chunk_and_the_layout) {
  ChunkLayout l;
  l.model_fingerprint = 42;
  l.num_layers = 2;
  l.kv_heads = 2;
  l.head_dim = 8;
  l.block_tokens = 4;
  l.chunk_tokens = 8;
  std::vector<int32_t> a = tokens(24), b = a;
  b[0] += 1;  // only the first chunk's tokens differ
  const auto ka = chunk_keys(l, a), kb = chunk_keys(l, b);
  ASSERT_EQ(ka.size(), 3u);
  EXPECT_EQ(ka, chunk_keys(l, a));
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(ka[i] == kb[i]) << "chunk " << i;
  EXPECT_EQ(chunk_keys(l, std::span<const int32_t>(a).first(23)).size(), 2u);  // whole chunks only
  ChunkLayout other = l;
  other.tp_rank = 1;
  other.tp_degree = 2;
  EXPECT_FALSE(chunk_keys(other, a)[0] == ka[0]);
  other = l;
  other.dtype = DType::f32;
  EXPECT_FALSE(chunk_keys(other, a)[0] == ka[0]);
  other = l;
  other.numerics = 7;  // KV computed another way (another SIMD path, a GPU)
  EXPECT_FALSE(chunk_keys(other, a)[0] == ka[0]);
  EXPECT_NE(full_chunk_key(ka[0]), compressed_chunk_key(ka[0], "snapkv ratio=4"));
  EXPECT_NE(compressed_chunk_key(ka[0], "snapkv ratio=4"), compressed_chunk_key(ka[0], "snapkv ratio=8"));
}

TEST(chunk_value, rejects_a_flipped_bit_another_version_another_key_and_a_short_value) {
  ChunkLayout l;
  l.num_layers = 1;
  l.kv_heads = 1;
  l.head_dim = 4;
  l.block_tokens = 4;
  l.chunk_tokens = 4;
  std::vector<std::byte> payload(full_chunk_payload_bytes(l));
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(i);
  const ChunkKey key{1, 2};
  const std::string good = encode_chunk_value(l, key, ChunkKind::full, payload);
  std::string why;
  ASSERT_EQ(decode_chunk_value(good, l, key, ChunkKind::full, why).size(), payload.size()) << why;

  std::string bad = good;
  bad[kChunkHeaderBytes + 3] ^= 1;
  EXPECT_TRUE(decode_chunk_value(bad, l, key, ChunkKind::full, why).empty());
  EXPECT_EQ(why, "checksum mismatch");
  bad = good;
  bad[4] = char(kChunkFormatVersion + 1);
  EXPECT_TRUE(decode_chunk_value(bad, l, key, ChunkKind::full, why).empty());
  EXPECT_NE(why.find("format version"), std::string::npos) << why;
  EXPECT_TRUE(decode_chunk_value(good, l, ChunkKey{1, 3}, ChunkKind::full, why).empty());
  EXPECT_NE(why.find("another key"), std::string::npos) << why;
  EXPECT_TRUE(decode_chunk_value(good.substr(0, good.size() - 1), l, key, ChunkKind::full, why).empty());
  EXPECT_TRUE(decode_chunk_value(good.substr(0, 10), l, key, ChunkKind::full, why).empty());
  EXPECT_TRUE(decode_chunk_value(good, l, key, ChunkKind::compressed, why).empty());
}

TEST(redis_url, parses_host_and_port_and_names_a_bad_url_in_one_line) {
  EXPECT_EQ(parse_redis_url("redis://127.0.0.1:7001").port, 7001);
  EXPECT_EQ(parse_redis_url("redis://cache.local").port, 6379);
  EXPECT_EQ(parse_redis_url("redis://[::1]:7002").host, "::1");
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:x1",
                          "redis://u@h:1"}) {
    try {
      (void)parse_redis_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(bad), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

std::string key_of(int i) {
  std::string k = "k";
  k += std::to_string(i);
  return k;
}

TEST(redis_client, pipelines_commands_over_a_pool_and_returns_replies_in_order) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  RedisClient c(parse_redis_url(server.url()), {}, 3);
  std::vector<RedisCommand> cmds;
  for (int i = 0; i < 50; ++i) cmds.push_back({"SET", key_of(i), std::string(i * 1000, char('a' + i % 26))});
  for (const RedisReply& r : c.pipeline(cmds)) EXPECT_EQ(r.str, "OK");
  cmds.clear();
  for (int i = 0; i < 50; ++i) cmds.push_back({"GET", key_of(i)});
  cmds.push_back({"GET", "missing"});
  const auto replies = c.pipeline(cmds);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(replies[i].str, std::string(i * 1000, char('a' + i % 26))) << i;
  EXPECT_TRUE(replies.back().is_nil());
}

TEST(redis_client, fails_in_one_line_when_the_store_is_down_and_reconnects_when_it_is_back) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  RedisClient c(parse_redis_url(server.url()), {std::chrono::milliseconds(3000), std::chrono::milliseconds(3000)}, 2);
  EXPECT_EQ(c.command({"PING"}).str, "PONG");
  server.kill();  // connections are refused at once
  // Hold the freed port (bound, not listening: connections are still refused) so
  // that a redis-server another test starts meanwhile cannot take it and answer.
  // SO_REUSEADDR: the killed store's side of the connections sits in TIME_WAIT.
  const int guard = socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  setsockopt(guard, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(server.port()));
  const bool held = bind(guard, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (held) {
    try {
      (void)c.command({"PING"});
      ADD_FAILURE() << "a dead store answered";
    } catch (const RedisError& e) {
      EXPECT_NE(std::string(e.what()).find(server.url()), std::string::npos) << e.what();
    }
  } else {  // another process took the port at once: it is not this store
    std::printf("  port %d taken by another process after the kill: dead-store check skipped\n", server.port());
    try {
      (void)c.command({"PING"});  // the pool's connections to the killed store go
    } catch (const RedisError&) {
    }
  }
  close(guard);
  server.restart();
  ASSERT_TRUE(server.available()) << server.reason();
  EXPECT_EQ(c.command({"PING"}).str, "PONG");
}

TEST(redis_client, times_out_on_a_paused_store) {
  test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const RedisTimeouts generous{std::chrono::milliseconds(3000), std::chrono::milliseconds(3000)};
  RedisClient c(parse_redis_url(server.url()), generous, 1);
  EXPECT_EQ(c.command({"PING"}).str, "PONG");
  server.pause();
  c.set_timeouts({std::chrono::milliseconds(3000), std::chrono::milliseconds(200)});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW((void)c.command({"PING"}), RedisError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  server.resume();
  c.set_timeouts(generous);
  EXPECT_EQ(c.command({"PING"}).str, "PONG");
}

struct remote_tier : ::testing::Test {
  test::RedisServer server;
  HostFullTier src{small_kv()}, dst{small_kv()};
  std::vector<int32_t> prompt = tokens(36);  // 4 whole chunks of 8, 4 tokens left
  void SetUp() override {
    if (!server.available()) GTEST_SKIP() << server.reason();
    fill(src, 1, prompt.size());
  }
  // Publishes every chunk of request 1 and waits until the store has them.
  void publish_all(RemoteTier& r) {
    EXPECT_EQ(r.publish(prompt, 0, src, 1), 4u);
    r.flush();
    EXPECT_EQ(r.publish_stats().sent, 4u);
  }
  RemoteFetch fetch(RemoteTier& r, uint64_t id) {
    dst.create(id);
    return r.fetch_prefix(prompt, prompt.size() - 1, dst, id);
  }
  RedisClient raw() { return RedisClient(parse_redis_url(server.url())); }
};

TEST_F(remote_tier, a_published_prefix_comes_back_bit_for_bit) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  const RemoteFetch f = fetch(r, 5);
  EXPECT_EQ(f.chunks, 4u);
  EXPECT_EQ(f.positions, 32u);
  EXPECT_EQ(f.stop_reason, "");
  EXPECT_GT(f.bytes_full, 32 * dst.bytes_per_token());
  ASSERT_EQ(dst.length(5), 32u);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 5, l, 32), layer_bytes(src, 1, l, 32)) << "layer " << l;

  // Another model (fingerprint) finds nothing.
  RemoteTier other(remote_cfg(server.url()), small_kv(), 100);
  EXPECT_EQ(fetch(other, 6).chunks, 0u);
}

TEST_F(remote_tier, a_missing_chunk_ends_the_prefix_there) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  RedisClient c = raw();
  const auto keys = chunk_keys(r.layout(), prompt);
  EXPECT_EQ(c.command({"DEL", full_chunk_key(keys[2])}).integer, 1);
  RemoteFetch f = fetch(r, 5);
  EXPECT_EQ(f.chunks, 2u);
  EXPECT_NE(f.stop_reason.find("chunk 2 not in the store"), std::string::npos) << f.stop_reason;
  EXPECT_EQ(dst.length(5), 16u);

  EXPECT_EQ(c.command({"FLUSHALL"}).str, "OK");
  f = fetch(r, 6);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_EQ(dst.length(6), 0u);
}

TEST_F(remote_tier, a_corrupt_or_foreign_value_ends_the_prefix_before_it) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  RedisClient c = raw();
  const auto keys = chunk_keys(r.layout(), prompt);
  std::string v = c.command({"GET", full_chunk_key(keys[1])}).str;
  v[v.size() / 2] ^= 0x10;  // one payload bit
  EXPECT_EQ(c.command({"SET", full_chunk_key(keys[1]), v}).str, "OK");
  RemoteFetch f = fetch(r, 5);
  EXPECT_EQ(f.chunks, 1u);
  EXPECT_NE(f.stop_reason.find("checksum mismatch"), std::string::npos) << f.stop_reason;

  // Chunk 0 written by another format version.
  v = c.command({"GET", full_chunk_key(keys[0])}).str;
  v[4] = char(kChunkFormatVersion + 1);
  EXPECT_EQ(c.command({"SET", full_chunk_key(keys[0]), v}).str, "OK");
  f = fetch(r, 6);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("format version"), std::string::npos) << f.stop_reason;

  // Chunk 3's value stored under chunk 2's key (a value of another key).
  EXPECT_EQ(c.command({"SET", full_chunk_key(keys[0]), c.command({"GET", full_chunk_key(keys[3])}).str}).str, "OK");
  f = fetch(r, 7);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("another key"), std::string::npos) << f.stop_reason;
}

TEST_F(remote_tier, a_store_that_is_down_or_paused_costs_a_timeout_and_delivers_nothing) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  RemoteTierConfig impatient = remote_cfg(server.url());
  impatient.timeouts.io = std::chrono::milliseconds(300);
  RemoteTier paused_reader(impatient, small_kv(), 99);
  server.pause();
  auto t0 = std::chrono::steady_clock::now();
  RemoteFetch f = fetch(paused_reader, 5);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("no reply within"), std::string::npos) << f.stop_reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  server.kill();  // resumes, then kills
  f = fetch(r, 6);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("cannot connect"), std::string::npos) << f.stop_reason;
  // Publishing to a dead store neither blocks nor throws: the chunks count as failed.
  EXPECT_EQ(r.publish(prompt, 0, src, 1), 4u);
  r.flush();
  EXPECT_EQ(r.publish_stats().failed, 4u);
}

TEST_F(remote_tier, after_a_fault_the_store_is_skipped_until_the_retry_pause_is_over) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  RemoteTierConfig cfg = remote_cfg(server.url());
  cfg.timeouts.io = std::chrono::milliseconds(300);
  cfg.retry_after = std::chrono::milliseconds(400);
  RemoteTier reader(cfg, small_kv(), 99);
  server.pause();
  RemoteFetch f = fetch(reader, 5);
  EXPECT_NE(f.stop_reason.find("no reply within"), std::string::npos) << f.stop_reason;
  // The next fetch does not wait for its own deadline: it is told at once.
  f = fetch(reader, 6);
  EXPECT_EQ(f.chunks, 0u);
  EXPECT_NE(f.stop_reason.find("store skipped"), std::string::npos) << f.stop_reason;
  EXPECT_NE(f.stop_reason.find("no reply within"), std::string::npos) << "names the fault: " << f.stop_reason;
  EXPECT_EQ(reader.skipped_while_down(), 1u);
  // Publishing meanwhile drops the chunks unsent, counted.
  EXPECT_EQ(reader.publish(prompt, 0, src, 1), 4u);
  reader.flush();
  EXPECT_EQ(reader.publish_stats().failed, 4u);
  EXPECT_EQ(reader.publish_stats().skipped_store_down, 4u);
  server.resume();
  // Once the pause is over the store is asked again, and answers.
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  f = fetch(reader, 7);
  EXPECT_EQ(f.chunks, 4u) << f.stop_reason;
  EXPECT_EQ(f.stop_reason, "");
}

TEST_F(remote_tier, tiers_sharing_a_health_skip_the_store_after_a_fault_either_one_saw) {
  RemoteTierConfig cfg = remote_cfg(server.url());
  cfg.timeouts.io = std::chrono::milliseconds(300);
  cfg.retry_after = std::chrono::milliseconds(60000);
  RemoteTier first(cfg, small_kv(), 99);
  RemoteTier second(cfg, small_kv(), 99, first.health());
  RemoteTier alone(cfg, small_kv(), 99);  // its own health
  EXPECT_EQ(first.health(), second.health());
  server.pause();
  const RemoteFetch f = fetch(first, 5);
  EXPECT_NE(f.stop_reason.find("no reply within"), std::string::npos) << f.stop_reason;
  const auto t0 = std::chrono::steady_clock::now();
  const RemoteFetch g = fetch(second, 6);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250))
      << "skipped at once, no deadline of its own";
  EXPECT_NE(g.stop_reason.find("store skipped"), std::string::npos) << g.stop_reason;
  EXPECT_EQ(second.skipped_while_down(), 1u);
  const RemoteFetch h = fetch(alone, 7);
  EXPECT_NE(h.stop_reason.find("no reply within"), std::string::npos)
      << "a tier with its own health asks: " << h.stop_reason;
  server.resume();
}

TEST_F(remote_tier, a_zero_retry_pause_asks_the_store_every_time) {
  RemoteTierConfig cfg = remote_cfg(server.url());
  cfg.timeouts.io = std::chrono::milliseconds(200);
  cfg.retry_after = std::chrono::milliseconds(0);
  RemoteTier reader(cfg, small_kv(), 99);
  server.pause();
  for (uint64_t id : {5, 6}) {
    const RemoteFetch f = fetch(reader, id);
    EXPECT_NE(f.stop_reason.find("no reply within"), std::string::npos) << id << ": " << f.stop_reason;
  }
  EXPECT_EQ(reader.skipped_while_down(), 0u);
  server.resume();
}

TEST_F(remote_tier, a_connection_dropped_mid_transfer_keeps_only_the_chunks_that_arrived_whole) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  // Chunks are fetched two per batch, one on each pooled connection; the proxy cuts
  // the second batch's replies short.
  const size_t value = kChunkHeaderBytes + full_chunk_payload_bytes(r.layout());
  test::TcpProxy proxy(server.port(), {.drop_after = 2 * value + value / 2});
  ASSERT_GT(proxy.port(), 0);
  RemoteTierConfig cfg = remote_cfg(proxy.url());
  cfg.connections = 1;
  RemoteTier via_proxy(cfg, small_kv(), 99);
  const RemoteFetch f = fetch(via_proxy, 5);
  EXPECT_EQ(f.chunks, 2u);
  EXPECT_NE(f.stop_reason.find("closed"), std::string::npos) << f.stop_reason;
  EXPECT_EQ(dst.length(5), 16u);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layer_bytes(dst, 5, l, 16), layer_bytes(src, 1, l, 16));
}

TEST_F(remote_tier, a_byte_flipped_in_transfer_is_caught_and_ends_the_prefix) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  const size_t value = kChunkHeaderBytes + full_chunk_payload_bytes(r.layout());
  // A byte inside chunk 1's payload (after chunk 0's reply and chunk 1's header).
  test::TcpProxy proxy(server.port(), {.flip_at = value + 2 * 16 + kChunkHeaderBytes + 40});
  RemoteTierConfig cfg = remote_cfg(proxy.url());
  cfg.connections = 1;
  RemoteTier via_proxy(cfg, small_kv(), 99);
  const RemoteFetch f = fetch(via_proxy, 5);
  EXPECT_EQ(f.chunks, 1u);
  EXPECT_NE(f.stop_reason.find("checksum mismatch"), std::string::npos) << f.stop_reason;
  EXPECT_EQ(layer_bytes(dst, 5, 0, 8), layer_bytes(src, 1, 0, 8));
}

TEST_F(remote_tier, publishing_drops_chunks_beyond_its_queue_bound) {
  RemoteTierConfig cfg = remote_cfg(server.url());
  cfg.publish_queue_bytes = 1;  // nothing fits
  RemoteTier r(cfg, small_kv(), 99);
  EXPECT_EQ(r.publish(prompt, 0, src, 1), 0u);
  EXPECT_EQ(r.publish_stats().dropped_full_queue, 4u);
}

TEST_F(remote_tier, cache_stats_counts_and_cache_clear_deletes_only_our_keys) {
  RemoteTier r(remote_cfg(server.url()), small_kv(), 99);
  publish_all(r);
  RedisClient c = raw();
  EXPECT_EQ(c.command({"SET", "someone-else", "x"}).str, "OK");
  const RemoteStoreStats s = remote_store_stats(r.endpoint());
  EXPECT_EQ(s.full_chunks, 4u);
  EXPECT_EQ(s.compressed_chunks, 0u);
  EXPECT_GT(s.value_bytes, 0u);
  EXPECT_FALSE(s.used_memory_human.empty());
  EXPECT_EQ(remote_store_clear(r.endpoint()), 4u);
  EXPECT_EQ(remote_store_stats(r.endpoint()).full_chunks, 0u);
  EXPECT_EQ(c.command({"GET", "someone-else"}).str, "x");
}

}  // namespace
}  // namespace vc

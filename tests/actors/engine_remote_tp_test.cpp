// The actor engine at tensor-parallel degree 2 with the remote prefix cache, against
// a real redis-server: each rank publishes and fetches its own KV heads' chunks
// (keys of its own), a warm request's tokens and logprobs equal the same engine's
// without the store bit for bit, and when one rank's chunk is missing every rank
// takes the shortest prefix, with the same tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/actors/engine_remote_support.hpp"

namespace {

using namespace vc::test::engine_remote;

EngineConfig tp2(const std::string& url = "") {
  EngineConfig c = config(url);
  c.tp = 2;
  return c;
}

std::vector<std::string> chunk_keys(const std::string& url) {
  vc::RedisClient c(vc::parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "100000"});
  std::vector<std::string> keys;
  for (const auto& k : scan.elements.at(1).elements) keys.push_back(k.str);
  return keys;
}

TEST(engine_remote_tp, each_rank_fetches_its_own_chunks_and_the_tokens_equal_the_engine_without_the_store) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  struct Case {
    const char* mode;
    const char* compressor;
    bool sampled;
  };
  for (const Case k : {Case{"vericache", "snapkv", false}, Case{"vericache", "kivi", true},
                       Case{"lossy", "snapkv", true}}) {
    const std::string what = std::string(k.mode) + " " + k.compressor + (k.sampled ? " seeded" : " greedy");
    Request req = long_request(k.mode, k.compressor, k.sampled);
    if (std::string(k.compressor) == "kivi") req.draft = "auto";
    Result local;
    {
      Engine plain(tp2());
      local = run(plain, req);
    }
    server.restart();
    Engine engine(tp2(server.url()));
    const Result cold = run(engine, req);
    expect_same_output(local, cold, "cold, " + what);
    EXPECT_EQ(2u, cold.stats.remote_chunks_published) << what << ": rank 0's";
    EXPECT_EQ(0u, cold.stats.remote_compressed_chunks_published) << "degree 1's alone";
    wait_for_chunks(server.url(), 4);
    EXPECT_EQ(4u, stored_chunks(server.url())) << what << ": 2 chunks per rank";

    const Result warm = run(engine, req);
    expect_same_output(local, warm, "warm, " + what);
    EXPECT_EQ(2u, warm.stats.remote_chunks_hit) << what << ": " << warm.stats.remote_stop_reason;
    EXPECT_FALSE(warm.stats.remote_compressed_first);
    EXPECT_EQ(0u, warm.stats.remote_chunks_published);
    EXPECT_EQ(0u, held_after_settling(engine)) << what;
  }
}

TEST(engine_remote_tp, a_chunk_one_rank_lacks_makes_every_rank_take_the_shorter_prefix) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", true);
  Result local;
  {
    Engine plain(tp2());
    local = run(plain, req);
  }
  Engine engine(tp2(server.url()));
  (void)run(engine, req);
  wait_for_chunks(server.url(), 4);
  const std::vector<std::string> keys = chunk_keys(server.url());
  ASSERT_EQ(4u, keys.size());
  size_t disagreements = 0;
  for (const std::string& key : keys) {  // one chunk gone at a time
    {
      vc::RedisClient c(vc::parse_redis_url(server.url()));
      (void)c.command({"DEL", key});
    }
    const Result r = run(engine, req);
    expect_same_output(local, r, "without " + key);
    const auto& s = r.stats;
    EXPECT_LT(s.remote_chunks_hit, 2u) << key;
    if (s.remote_stop_reason.find("the tensor-parallel ranks' cached prefixes differ") != std::string::npos) {
      ++disagreements;
      EXPECT_EQ(s.remote_positions, s.remote_chunks_hit * kChunk);
    }
    wait_for_chunks(server.url(), 4);  // republished by that run
  }
  EXPECT_GT(disagreements, 0u) << "some deleted chunk was one rank's alone";
  EXPECT_EQ(0u, held_after_settling(engine));
}

}  // namespace

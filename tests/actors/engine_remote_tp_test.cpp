// The actor engine at tensor-parallel degree 2 with the remote prefix cache, against
// a real redis-server: each rank publishes and fetches its own KV heads' chunks,
// full and compressed (keys of its own); a warm request's tokens and logprobs equal
// the same engine's without the store bit for bit, by the full flow and compressed
// first; when one rank's full chunk is missing every rank takes the shortest prefix,
// and when one rank's compressed chunk is missing the request takes the full flow,
// with the same tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/actors/engine_remote_support.hpp"
#include "tools/vericache/throttled_proxy.hpp"

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
    EngineConfig cfg = tp2(server.url());
    cfg.remote_compressed_first = false;  // the full flow (compressed first: below)
    Engine engine(cfg);
    const Result cold = run(engine, req);
    expect_same_output(local, cold, "cold, " + what);
    EXPECT_EQ(2u, cold.stats.remote_chunks_published) << what << ": rank 0's";
    EXPECT_EQ(2u, cold.stats.remote_compressed_chunks_published) << what << ": rank 0's";
    wait_for_chunks(server.url(), 8);
    EXPECT_EQ(8u, stored_chunks(server.url())) << what << ": 2 full and 2 compressed chunks per rank";

    const Result warm = run(engine, req);
    expect_same_output(local, warm, "warm, " + what);
    EXPECT_EQ(2u, warm.stats.remote_chunks_hit) << what << ": " << warm.stats.remote_stop_reason;
    EXPECT_FALSE(warm.stats.remote_compressed_first);
    EXPECT_EQ(0u, warm.stats.remote_chunks_published);
    EXPECT_EQ(0u, held_after_settling(engine)) << what;
  }
}

TEST(engine_remote_tp, compressed_first_fetches_each_ranks_view_and_decodes_the_bits_of_the_engine_without_the_store) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  for (const bool sampled : {false, true}) {
    const std::string what = sampled ? "seeded" : "greedy";
    Request req = long_request("vericache", sampled ? "kivi" : "snapkv", sampled);
    Result local;
    {
      Engine plain(tp2());
      local = run(plain, req);
    }
    server.restart();
    Engine engine(tp2(server.url()));
    (void)run(engine, req);
    wait_for_chunks(server.url(), 8);
    const Result warm = run(engine, req);
    expect_same_output(local, warm, "warm, " + what);
    EXPECT_TRUE(warm.stats.remote_compressed_first) << what << ": " << warm.stats.remote_compressed_stop_reason;
    EXPECT_EQ(2u, warm.stats.remote_compressed_chunks_hit) << what;
    EXPECT_EQ(2u, warm.stats.remote_chunks_hit) << what << ": the full chunks behind the views";
    EXPECT_GT(warm.stats.rounds, 0u);
    EXPECT_EQ(0u, held_after_settling(engine)) << what;

    // Behind a slow link every rank drafts from the same guess while its full
    // chunks arrive, then the exact prefill runs on every rank at once.
    vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), kSlowLinkBytesPerSecond);
    EngineConfig sc = tp2(slow.url());
    sc.remote_timeout_ms = 60000;
    Engine slow_engine(sc);
    const Result sw = run(slow_engine, req);
    expect_same_output(local, sw, "slow link, " + what);
    EXPECT_TRUE(sw.stats.remote_compressed_first) << sw.stats.remote_compressed_stop_reason;
    EXPECT_GT(sw.stats.remote_predrafted, 0u) << what << ": drafted while the full chunks arrived";
    EXPECT_EQ(2u, sw.stats.remote_chunks_hit);
    EXPECT_EQ(0u, held_after_settling(slow_engine));
  }
  // Lossy decodes over the fetched views: the same tokens on every warm run.
  server.restart();
  Engine engine(tp2(server.url()));
  const Request lossy = long_request("lossy", "snapkv", true);
  (void)run(engine, lossy);
  wait_for_chunks(server.url(), 8);
  const Result a = run(engine, lossy), b = run(engine, lossy);
  EXPECT_TRUE(a.stats.remote_compressed_first) << a.stats.remote_compressed_stop_reason;
  expect_same_output(a, b, "lossy over the fetched views, twice");
}

TEST(engine_remote_tp, a_longer_prompt_rebuilds_every_ranks_view_and_publishes_its_chunks_at_degrees_2_and_4) {
  // A 650-token prompt over a cached 300-token one's chunk: every rank drafts over
  // its fetched view, rebuilds it over the whole prompt once the full KV is in, and
  // publishes its chunk 1; the next run hits both. Tokens equal the engine without
  // the store.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request longer = long_request("vericache", "snapkv", false);
  Request shorter = longer;
  shorter.prompt_ids.resize(300);
  for (const int d : {2, 4}) {
    const std::string what = "tp " + std::to_string(d);
    EngineConfig c = config();
    c.tp = d;
    c.remote_compressed_suffix = 2048;  // its 394-position suffix
    Result local;
    {
      Engine plain(c);
      local = run(plain, longer);
    }
    server.restart();
    c.remote_url = server.url();
    Engine engine(c);
    (void)run(engine, shorter);
    wait_for_chunks(server.url(), size_t(2 * d));
    const Result first = run(engine, longer);
    expect_same_output(local, first, "first, " + what);
    ASSERT_TRUE(first.stats.remote_compressed_first) << what << ": " << first.stats.remote_compressed_stop_reason;
    EXPECT_EQ(1u, first.stats.remote_compressed_chunks_hit) << what;
    EXPECT_EQ(1u, first.stats.remote_compressed_chunks_published) << what << ": rank 0's chunk 1";
    wait_for_chunks(server.url(), size_t(4 * d));
    const Result second = run(engine, longer);
    expect_same_output(local, second, "second, " + what);
    EXPECT_EQ(2u, second.stats.remote_compressed_chunks_hit) << what;
  }
}

TEST(engine_remote_tp, a_chunk_one_rank_lacks_never_changes_a_token) {
  // A full chunk one rank lacks: every rank takes the shorter prefix (after the
  // drafter's head start over the views). A compressed chunk one rank lacks: no
  // view is used, the full flow runs.
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
  wait_for_chunks(server.url(), 8);
  const std::vector<std::string> keys = chunk_keys(server.url());
  ASSERT_EQ(8u, keys.size()) << "2 full and 2 compressed chunks per rank";
  size_t full_disagreements = 0, view_disagreements = 0;
  for (const std::string& key : keys) {  // one chunk gone at a time
    {
      vc::RedisClient c(vc::parse_redis_url(server.url()));
      (void)c.command({"DEL", key});
    }
    const Result r = run(engine, req);
    expect_same_output(local, r, "without " + key);
    const auto& s = r.stats;
    if (s.remote_stop_reason.find("the tensor-parallel ranks' cached prefixes differ") != std::string::npos) {
      ++full_disagreements;
      EXPECT_LT(s.remote_chunks_hit, 2u) << key;
      EXPECT_EQ(s.remote_positions, s.remote_chunks_hit * kChunk);
    }
    if (s.remote_compressed_stop_reason.find("the tensor-parallel ranks' compressed prefixes differ") !=
        std::string::npos) {
      ++view_disagreements;
      EXPECT_FALSE(s.remote_compressed_first) << key;
    }
    wait_for_chunks(server.url(), 8);  // republished by that run
  }
  EXPECT_GT(full_disagreements, 0u) << "some deleted full chunk was one rank's alone";
  EXPECT_GT(view_disagreements, 0u) << "some deleted compressed chunk was one rank's alone";
  EXPECT_EQ(0u, held_after_settling(engine));
}

}  // namespace

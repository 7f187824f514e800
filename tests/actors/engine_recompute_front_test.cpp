// The actor engine recomputing the front while the back is fetched
// (EngineConfig::remote_recompute_front) against a real redis-server: the tokens
// equal a run without the store, and the full-tier entry the drafter creates for
// the scheduler is freed whether the request completes or is cancelled before its
// prefill ran (the release goes through the drafter, after that prefill).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include <vericache/engine.hpp>

#include "tests/actors/engine_remote_support.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace {

using namespace vc::test::engine_remote;

EngineConfig front_config(const std::string& url) {
  EngineConfig c = config(url);
  c.remote_compressed_first = false;
  c.remote_recompute_front = true;
  return c;
}

TEST(engine_recompute_front, a_completed_or_cancelled_request_leaves_no_full_tier_entry_behind) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", false);
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  {
    Engine engine(front_config(server.url()));
    expect_same_output(local, run(engine, req), "cold");
    wait_for_chunks(server.url(), 2);
    const Result warm = run(engine, req);
    expect_same_output(local, warm, "warm");
    EXPECT_EQ(2u * kChunk, warm.stats.remote_positions + warm.stats.remote_front_recomputed);
    EXPECT_EQ(0u, held_after_settling(engine));
  }
  // Over a slow link, cancelled at once: the drafter may not have made the entry yet.
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), 2e6);
  EngineConfig sc = front_config(slow.url());
  sc.remote_timeout_ms = 60000;
  Engine engine(sc);
  for (int wait_ms : {0, 0, 0, 0, 0, 0, 30}) {
    auto sub = engine.submit(req);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    engine.cancel(sub.id);
    const Result r = sub.result.get();
    EXPECT_TRUE(r.finish_reason == "cancelled" || r.ok) << r.error;
    EXPECT_EQ(0u, held_after_settling(engine)) << "cancelled after " << wait_ms << " ms";
  }
  expect_same_output(local, run(engine, req), "after the cancels");
  EXPECT_EQ(0u, held_after_settling(engine));
}

}  // namespace

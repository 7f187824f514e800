// The engine emits a lossy or vericache request's first token as soon as the
// drafter's prefill has the prompt's exact logits, before the view is built
// (first_token_msg); a request that its first token ends still publishes its chunks
// to the store and reports its prefill, as before.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <vericache/engine.hpp>

// GCC 12 at -O3 reports a false -Wrestrict in std::string's assignment of a literal
// inlined from long_request (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
#include "tests/actors/engine_remote_support.hpp"

namespace {

using namespace vc::test::engine_remote;

TEST(engine_first_token, the_first_token_is_called_back_before_the_prefill_is_through) {
  // The scheduler handles the first token's message before the prefill's (the same
  // mailbox, in order), so the callback comes before the prefill's end whatever the
  // machine's speed; the gap is the view's building.
  Engine engine(config());
  for (const char* mode : {"vericache", "lossy"}) {
    Request r = long_request(mode, "kvzip", false);
    r.max_tokens = 4;
    const auto t0 = std::chrono::steady_clock::now();
    double first = -1;
    const Result res = engine.submit(r, [&](uint64_t, int32_t) {
      if (first < 0) first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }).result.get();
    ASSERT_TRUE(res.ok) << res.error;
    EXPECT_GT(res.stats.prefilled_after_seconds, 0.0) << mode;
    EXPECT_LT(first, res.stats.prefilled_after_seconds) << mode << ": the first token waited for the view";
  }
}

TEST(engine_first_token, a_request_ended_by_its_first_token_still_publishes_its_chunks) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  EngineConfig c = config(server.url());
  c.remote_compressed_first = false;
  Engine engine(c);
  Request r = long_request("vericache", "snapkv", false);
  r.max_tokens = 1;  // a cache warm-up: one token
  const Result cold = run(engine, r);
  EXPECT_EQ(cold.output_ids.size(), 1u);
  EXPECT_EQ(cold.finish_reason, "length");
  EXPECT_EQ(2u, cold.stats.remote_chunks_published) << "the prompt's full chunks";
  EXPECT_EQ(2u, cold.stats.remote_compressed_chunks_published) << "and its view's";
  EXPECT_GT(cold.stats.prefill_seconds, 0.0);
  wait_for_chunks(server.url(), 4);
  r.max_tokens = 8;
  const Result warm = run(engine, r);
  EXPECT_EQ(2u, warm.stats.remote_chunks_hit) << warm.stats.remote_stop_reason;
  EXPECT_EQ(warm.output_ids[0], cold.output_ids[0]);
  EXPECT_EQ(0u, held_after_settling(engine)) << "every entry freed";
}

}  // namespace

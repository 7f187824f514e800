// The actor engine with the remote prefix cache (EngineConfig::remote_url) against a
// real redis-server on a free loopback port: a second submission of a long prompt
// takes its prefix from the store (the full flow), and its tokens and logprobs equal a run without
// the store bit for bit (vericache and lossy, greedy and seeded); a store killed
// before a request, or chunks corrupted in it, cost a local recompute, never a
// different token, and a paused one a timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <vericache/engine.hpp>

#include "tests/actors/engine_remote_support.hpp"

namespace {

using namespace vc::test::engine_remote;

TEST(engine_remote, a_second_submission_takes_its_prefix_from_the_store_and_decodes_the_same_tokens) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  struct Case {
    const char* mode;
    const char* compressor;
  };
  for (const Case k : {Case{"vericache", "snapkv"}, Case{"lossy", "kivi"}}) {
    for (const bool sampled : {false, true}) {
      const std::string what = std::string(k.mode) + " " + k.compressor + (sampled ? " seeded" : " greedy");
      const Request req = long_request(k.mode, k.compressor, sampled);
      Result local;
      {
        Engine plain(config());
        local = run(plain, req);
        EXPECT_FALSE(local.stats.remote);
      }
      server.restart();  // an empty store
      EngineConfig c = config(server.url());
      c.remote_compressed_first = false;  // the full flow (engine_compressed_first_test.cpp: the other)
      Engine engine(c);
      const Result cold = run(engine, req);
      expect_same_output(local, cold, "cold, " + what);
      EXPECT_TRUE(cold.stats.remote);
      EXPECT_EQ(0u, cold.stats.remote_chunks_hit) << cold.stats.remote_stop_reason;
      EXPECT_EQ(2u, cold.stats.remote_chunks_published) << what;
      EXPECT_EQ(2u, cold.stats.remote_compressed_chunks_published) << what << ": the view's chunks";
      wait_for_chunks(server.url(), 4);

      const Result warm = run(engine, req);
      expect_same_output(local, warm, "warm, " + what);
      EXPECT_EQ(2u, warm.stats.remote_chunks_hit) << what << ": " << warm.stats.remote_stop_reason;
      EXPECT_EQ(2 * kChunk, warm.stats.remote_positions);
      EXPECT_GT(warm.stats.remote_bytes_fetched, 0u);
      EXPECT_EQ(0u, warm.stats.remote_chunks_published) << "the store had them";
      EXPECT_EQ(0u, held_after_settling(engine)) << what << ": every entry freed";
    }
  }
}

TEST(engine_remote, a_store_killed_before_a_request_costs_a_local_prefill_not_a_token) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", true);
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  Engine engine(config(server.url()));
  server.kill();
  const Result r = run(engine, req);
  expect_same_output(local, r, "store down");
  EXPECT_TRUE(r.stats.remote);
  EXPECT_EQ(0u, r.stats.remote_chunks_hit);
  EXPECT_NE(r.stats.remote_stop_reason.find(server.url()), std::string::npos)
      << r.stats.remote_stop_reason;
  EXPECT_EQ(0u, held_after_settling(engine));
}

TEST(engine_remote, a_paused_store_costs_one_timeout_and_a_local_prefill_not_a_token) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", false);
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  EngineConfig c = config(server.url());
  c.remote_timeout_ms = 300;
  Engine engine(c);
  server.pause();  // accepts connections, never answers
  const Result r = run(engine, req);
  server.resume();
  expect_same_output(local, r, "store paused");
  EXPECT_EQ(0u, r.stats.remote_chunks_hit);
  EXPECT_FALSE(r.stats.remote_stop_reason.empty());
  // The compressed chunks are asked for first: that fetch waits for the deadline,
  // and the full one is then skipped (remote_retry_ms).
  EXPECT_GE(r.stats.remote_compressed_fetch_seconds + r.stats.remote_fetch_seconds, 0.25)
      << "it waited for the store's deadline";
  EXPECT_FALSE(r.stats.remote_compressed_first);
}

TEST(engine_remote, requests_after_a_store_fault_skip_the_store_instead_of_each_waiting_a_deadline) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", false);
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  EngineConfig c = config(server.url());
  c.remote_timeout_ms = 300;
  c.remote_retry_ms = 600000;  // the whole test
  Engine engine(c);
  server.pause();
  const Result first = run(engine, req);
  const Result second = run(engine, req);
  server.resume();
  expect_same_output(local, first, "store paused, first request");
  expect_same_output(local, second, "store paused, second request");
  EXPECT_NE(first.stats.remote_stop_reason.find("no reply within"), std::string::npos)
      << first.stats.remote_stop_reason;
  EXPECT_NE(second.stats.remote_stop_reason.find("store skipped"), std::string::npos)
      << second.stats.remote_stop_reason;
  EXPECT_EQ(0u, second.stats.remote_chunks_hit);
  EXPECT_EQ(0u, held_after_settling(engine));
}

TEST(engine_remote, corrupt_chunks_in_the_store_are_refused_and_recomputed) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("lossy", "snapkv", false);
  Engine engine(config(server.url()));
  const Result cold = run(engine, req);
  wait_for_chunks(server.url(), 2);
  corrupt_every_chunk(server.url());
  const Result r = run(engine, req);
  expect_same_output(cold, r, "corrupt store");
  EXPECT_EQ(0u, r.stats.remote_chunks_hit);
  EXPECT_FALSE(r.stats.remote_stop_reason.empty());
}

TEST(engine_remote, full_mode_requests_never_ask_the_store) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Engine engine(config(server.url()));
  const Result r = run(engine, long_request("full", "snapkv", false));
  EXPECT_FALSE(r.stats.remote);
  EXPECT_EQ(0u, stored_chunks(server.url()));
}

TEST(engine_remote, a_bad_remote_url_fails_the_engine_naming_the_field) {
  EngineConfig c = config("http://127.0.0.1:1");
  try {
    Engine e(c);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("EngineConfig.remote_url"), std::string::npos) << e.what();
  }
}

}  // namespace

// Shared by the engine's remote prefix cache tests: an engine config over a store,
// a 650-token request (two chunks of 256 before SnapKV's window), and helpers that
// read the store and wait for write-behind publishing and for entries to be freed.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <vericache/engine.hpp>

#include "kvtiers/remote/redis_client.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc::test::engine_remote {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;
using vericache::Result;

constexpr size_t kChunk = 256;

// The store's link for the tests where the drafter must draft while the full chunks
// arrive. Full chunks of the 650-token request: 2 x 256 positions x 3 KB; at 0.5 MB/s
// they take about 3 s, the compressed ones a quarter of that, while the drafter's
// suffix over the view takes tens of milliseconds. Under ThreadSanitizer the drafter
// is 10x slower and shares the cores with another suite: 0.15 MB/s (about 10 s).
#if defined(__SANITIZE_THREAD__)
constexpr double kSlowLinkBytesPerSecond = 0.15e6;
#else
constexpr double kSlowLinkBytesPerSecond = 0.5e6;
#endif

inline EngineConfig config(const std::string& remote_url = "") {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.max_active = 4;
  c.remote_url = remote_url;
  c.remote_chunk_tokens = kChunk;
  c.remote_timeout_ms = 2000;
  return c;
}

// A prompt of 650 tokens: two complete chunks of 256 fit before snapkv's window.
inline Request long_request(const std::string& mode, const std::string& compressor, bool sampled) {
  const auto model = vc::test::tinycode();
  std::mt19937 rng(17);
  Request r;
  r.prompt_ids = vc::test::random_tokens(rng, 650, model->config().vocab_size,
                                         model->config().bos_token_id);
  r.max_tokens = 24;
  r.mode = mode;
  r.compressor = compressor;
  r.ratio = 4;
  r.draft = "6";
  r.ignore_eos = true;
  if (sampled) {
    r.temperature = 0.8f;
    r.top_k = 40;
    r.seed = 1234;
  }
  return r;
}

inline Result run(Engine& e, const Request& r) {
  Result res = e.submit(r).result.get();
  EXPECT_TRUE(res.ok) << res.error;
  return res;
}

inline void expect_same_output(const Result& want, const Result& got, const std::string& what) {
  EXPECT_EQ(want.output_ids, got.output_ids) << what;
  EXPECT_EQ(want.output_logprobs, got.output_logprobs) << what;
}

// Keys of this project in the store (vc:kv:*).
inline size_t stored_chunks(const std::string& url) {
  vc::RedisClient c(vc::parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "100000"});
  return scan.elements.at(1).elements.size();
}

// Publishing is write-behind: waits until the store holds `n` chunks (or 10 s).
inline void wait_for_chunks(const std::string& url, size_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stored_chunks(url) < n && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(stored_chunks(url), n);
}

// The full tier's entries are freed by the mover after the result is out: waits
// until none is held (or 10 s).
inline size_t held_after_settling(Engine& e) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (e.stats().full_tier_bytes_held > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return e.stats().full_tier_bytes_held;
}

// Flips one payload byte of every chunk this project holds in the store.
inline void corrupt_every_chunk(const std::string& url) {
  vc::RedisClient c(vc::parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "100000"});
  for (const auto& k : scan.elements.at(1).elements) {
    std::string v = c.command({"GET", k.str}).str;
    v[v.size() - 5] ^= 0x01;
    ASSERT_EQ(c.command({"SET", k.str, v}).str, "OK");
  }
}

}  // namespace vc::test::engine_remote

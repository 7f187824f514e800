// An embedder's mistakes through the public API: a token callback that throws, out of
// range EngineConfig fields, a trace asked of an engine that records none, bad
// row costs; each is a clear error naming what was wrong, and nothing else is lost.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <vericache/engine.hpp>

#include "tests/error_naming.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;

EngineConfig config() {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.threads = 1;
  return c;
}

vericache::Request request(const char* prompt = "def add(a, b):") {
  vericache::Request r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.ignore_eos = true;
  return r;
}

TEST(engine_misuse, a_token_callback_that_throws_ends_its_request_and_the_engine_goes_on) {
  Engine engine(config());
  int calls = 0;
  auto thrower = engine.submit(request(), [&](uint64_t, int32_t) {
    ++calls;
    throw std::runtime_error("callback boom");
  });
  const vericache::Result r = thrower.result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.finish_reason, "error");
  EXPECT_EQ(r.error, "the token callback threw: callback boom");
  EXPECT_EQ(calls, 1) << "no call after the one that threw";
  EXPECT_EQ(r.output_ids.size(), 1u);
  // Not a std::exception: the same, with a message saying so.
  const auto odd = engine.submit(request(), [](uint64_t, int32_t) { throw 42; }).result.get();
  EXPECT_FALSE(odd.ok);
  EXPECT_NE(odd.error.find("not a std::exception"), std::string::npos) << odd.error;
  // The engine serves the next requests, vericache and full, with and without a callback.
  vericache::Request vc = request();
  vc.mode = "vericache";
  size_t streamed = 0;
  const auto a = engine.submit(vc, [&](uint64_t, int32_t) { ++streamed; }).result.get();
  EXPECT_TRUE(a.ok) << a.error;
  EXPECT_EQ(streamed, a.output_ids.size());
  vericache::Request full = request();
  full.mode = "full";
  const auto b = engine.submit(full).result.get();
  EXPECT_TRUE(b.ok) << b.error;
  EXPECT_EQ(a.output_ids, b.output_ids);
  const vericache::EngineStats s = engine.stats();
  EXPECT_EQ(s.failed, 2u);
  EXPECT_EQ(s.completed, 2u);
}

TEST(engine_misuse, a_callback_throwing_in_the_middle_of_a_verified_round_stops_there) {
  Engine engine(config());
  vericache::Request r = request();
  r.mode = "vericache";
  r.draft = std::to_string(8);
  r.max_tokens = 24;
  int calls = 0;
  const auto res = engine.submit(r, [&](uint64_t, int32_t) {
    if (++calls == 3) throw std::runtime_error("third token");
  }).result.get();
  EXPECT_FALSE(res.ok);
  EXPECT_EQ(res.error, "the token callback threw: third token");
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(res.output_ids.size(), 3u);
}

TEST(engine_misuse, out_of_range_config_fields_are_errors_naming_the_field) {
  auto expect_refused = [](EngineConfig c, const std::string& what) {
    vc::test::expect_error_naming([&] { Engine e(c); }, what);
  };
  EngineConfig c = config();
  c.threads = -1;
  expect_refused(c, "EngineConfig.threads: must be 0 (auto) to 1024, got -1");
  c.threads = 100000;
  expect_refused(c, "EngineConfig.threads: must be 0 (auto) to 1024, got 100000");
  c = config();
  c.link_bytes_per_second = -1;
  expect_refused(c, "EngineConfig.link_bytes_per_second: must be 0 (unthrottled) or positive");
  c.link_bytes_per_second = std::nan("");
  expect_refused(c, "EngineConfig.link_bytes_per_second");
  c = config();
  c.remote_url = "redis://127.0.0.1:1";
  c.remote_timeout_ms = 0;
  expect_refused(c, "EngineConfig.remote_timeout_ms: must be 1 to 600000, got 0");
  c.remote_timeout_ms = 1000;
  c.remote_ttl_seconds = -1;
  expect_refused(c, "EngineConfig.remote_ttl_seconds: must be 0 (never expire)");
  c.remote_ttl_seconds = 60;
  c.remote_retry_ms = -5;
  expect_refused(c, "EngineConfig.remote_retry_ms: must be 0 (never skip the store)");
  c = config();
  c.fast_memory_bytes = std::numeric_limits<size_t>::max();
  expect_refused(c, "EngineConfig.fast_memory_bytes:");
  c = config();  // rounded up to whole blocks it wrapped to 0: a host tier refused it
  c.stage_positions = std::numeric_limits<size_t>::max();  // unnamed, a disk tier ran
  expect_refused(c, "EngineConfig.stage_positions: must be 0 (whole layers) to 16777216 positions");
  c.full_tier = "disk";
  expect_refused(c, "EngineConfig.stage_positions: must be 0 (whole layers) to 16777216 positions");
}

TEST(engine_misuse, a_trace_from_an_engine_that_records_none_says_which_field_to_set) {
  Engine engine(config());  // trace is false by default
  vc::test::expect_error_naming([&] { engine.write_trace("/tmp/vc-never-written.json"); },
                                "EngineConfig::trace was false");
}

TEST(engine_misuse, bad_row_costs_name_the_field_and_count_as_failed) {
  Engine engine(config());
  vericache::Request r = request();
  r.mode = "vericache";
  r.draft = "auto";
  r.row_costs = {{0, 0.1}};
  const auto res = engine.submit(r).result.get();
  EXPECT_FALSE(res.ok);
  EXPECT_NE(res.error.find("field 'row_costs': "), std::string::npos) << res.error;
  vericache::Request empty = request("");
  EXPECT_FALSE(engine.submit(empty).result.get().ok);
  const vericache::EngineStats s = engine.stats();
  EXPECT_EQ(s.submitted, 2u) << "refused requests are counted";
  EXPECT_EQ(s.failed, 2u);
}

}  // namespace

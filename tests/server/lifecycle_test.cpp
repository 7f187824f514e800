// `vericache serve` over a request's life: a client that disconnects cancels its
// request (plain or streamed), one that only half-closes (shuts down its sending
// side after the request) still gets the answer, and SIGTERM drains: requests in
// flight finish, new ones are refused, the process exits 0.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

// Tens of seconds of decoding on one slot: only cancellation frees it quickly.
const json kEndless = {{"prompt", "<|begin_of_text|>x"}, {"max_tokens", 30000},
                       {"ignore_eos", true}, {"mode", "full"}};

double seconds_for_a_short_request(int port) {
  const auto t0 = clock_type::now();
  const HttpResponse r = http_request(port, "POST", "/v1/completions",
                                      json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

TEST(serve_lifecycle, a_client_that_disconnects_cancels_its_request) {
  ServerProcess server({"--max-concurrency", "1"});
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "plain");
    json b = kEndless;
    b["stream"] = stream;
    if (stream) b["mode"] = "vericache";  // its full KV in the full tier too
    {
      HttpConnection c(server.port());
      c.send("POST", "/v1/completions", b.dump());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }  // closed
    // The one slot is free again long before the endless request could finish.
    EXPECT_LT(seconds_for_a_short_request(server.port()), 8.0);
  }
  // The workers free a cancelled request's tiers on their own messages, after its
  // result is out: give them a moment (generous: a loaded machine) before reading
  // the gauges, then require all of them.
  const std::vector<std::string> settled = {
      "vericache:engine_requests_total{outcome=\"cancelled\"} 2\n",
      "vericache:fast_memory_reserved_bytes 0\n",  // nothing of theirs in any tier
      "vericache:full_tier_bytes_held 0\n",
      "vericache:num_requests_running 0\n"};
  auto all_settled = [&](const std::string& m) {
    for (const auto& line : settled)
      if (m.find(line) == std::string::npos) return false;
    return true;
  };
  std::string metrics;
  for (int i = 0; i < 300; ++i) {
    metrics = http_request(server.port(), "GET", "/metrics").body;
    if (all_settled(metrics)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  for (const auto& line : settled) EXPECT_NE(metrics.find(line), std::string::npos) << line << metrics;
}

TEST(serve_lifecycle, a_client_that_half_closes_after_its_request_still_gets_the_answer) {
  ServerProcess server;
  // Long enough that the handler looks at the socket while the request runs.
  const json b = {{"prompt", "<|begin_of_text|>x"}, {"max_tokens", 1000}, {"ignore_eos", true},
                  {"mode", "full"}};
  for (const std::string version : {"HTTP/1.1", "HTTP/1.0"}) {
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(version + (stream ? " streamed" : " plain"));
      json body = b;
      body["stream"] = stream;
      HttpConnection c(server.port());
      c.set_version(version);
      c.set_read_timeout(60);
      c.send("POST", "/v1/completions", body.dump());
      c.shutdown_write();
      const HttpResponse r = c.read();
      ASSERT_EQ(r.status, 200) << r.body;
      if (stream) {
        const std::vector<std::string> events = sse_events(r.body);
        ASSERT_GE(events.size(), 2u);
        EXPECT_EQ(events.back(), "[DONE]");
        EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
      } else {
        EXPECT_EQ(r.json()["usage"]["completion_tokens"], 1000);
      }
    }
  }
}

TEST(serve_lifecycle, sigterm_lets_requests_in_flight_finish_then_exits_0) {
  ServerProcess server;
  HttpConnection busy(server.port());
  // Long enough to be in flight when the signal comes (300 tokens took about 60 ms
  // on the bundled model once the kernels got faster, and finished before it).
  const json b = {{"prompt", "<|begin_of_text|>x"}, {"max_tokens", 3000}, {"ignore_eos", true},
                  {"mode", "full"}};
  busy.send("POST", "/v1/completions", b.dump());
  HttpConnection idle(server.port());
  EXPECT_EQ(idle.request("GET", "/health").status, 200);
  // Signal once the request runs (not after a fixed sleep).
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    running = http_request(server.port(), "GET", "/metrics")
                  .body.find("vericache:num_requests_running 1\n") != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(running) << "the request never showed as running";
  server.signal(SIGTERM);
  const HttpResponse r = busy.read();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 3000);
  EXPECT_EQ(r.headers.at("connection"), "close");
  EXPECT_TRUE(idle.closed_by_peer(5.0));
  EXPECT_EQ(server.wait_exit(10.0), 0);
}

}  // namespace
}  // namespace vc::test

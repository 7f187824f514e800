// `vericache serve --read-timeout-s`: a request whose headers or body stall gets 408
// and its connection closes; a connection that sends nothing of a request (new, or
// idle between keep-alive requests) is closed without a reply; neither holds a
// connection slot or the shutdown, and requests being handled are not cut.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

// A request cut short: 29 of the 100 body bytes its Content-Length promises.
const std::string kShortBody =
    "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "Content-Length: 100\r\n\r\n{\"prompt\": \"x\", \"max_tokens\"";

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void expect_408(HttpConnection& c) {
  const HttpResponse r = c.read();
  ASSERT_EQ(r.status, 408) << r.body;
  const json e = r.json().at("error");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["code"], "request_timeout");
  EXPECT_EQ(r.headers.at("connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(2.0));
}

TEST(serve_read_timeout, a_client_that_stalls_mid_headers_gets_408_and_is_closed) {
  ServerProcess server({"--read-timeout-s", "1"});
  HttpConnection c(server.port());
  c.set_read_timeout(10);
  const auto t0 = clock_type::now();
  c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len");
  expect_408(c);
  EXPECT_GT(seconds_since(t0), 0.9);
}

TEST(serve_read_timeout, a_body_shorter_than_its_content_length_gets_408_and_is_closed) {
  ServerProcess server({"--read-timeout-s", "1"});
  HttpConnection c(server.port());
  c.set_read_timeout(10);
  c.send_raw(kShortBody);
  expect_408(c);
}

TEST(serve_read_timeout, a_connection_that_sends_nothing_is_closed_without_a_reply) {
  ServerProcess server({"--read-timeout-s", "1"});
  HttpConnection fresh(server.port());
  HttpConnection kept(server.port());
  EXPECT_EQ(kept.request("GET", "/health").status, 200);
  // closed_by_peer: the close came with no byte of a reply before it.
  EXPECT_TRUE(fresh.closed_by_peer(5.0));
  EXPECT_TRUE(kept.closed_by_peer(5.0));
}

TEST(serve_read_timeout, stalled_connections_give_their_slots_back_to_other_clients) {
  ServerProcess server({"--read-timeout-s", "1", "--max-connections", "3"});
  std::vector<std::unique_ptr<HttpConnection>> stalled;
  for (int i = 0; i < 3; ++i) {
    stalled.push_back(std::make_unique<HttpConnection>(server.port()));
    stalled.back()->send_raw(i == 0 ? kShortBody : "GET /health HTTP/1.1\r\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 503);
  HttpResponse r;
  const auto t0 = clock_type::now();
  while (r.status != 200 && seconds_since(t0) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    r = http_request(server.port(), "GET", "/health");
  }
  EXPECT_EQ(r.status, 200) << "the stalled connections still hold every slot";
}

TEST(serve_read_timeout, requests_that_run_longer_than_the_timeout_are_answered_in_full) {
  ServerProcess server({"--read-timeout-s", "0.2"});
  HttpConnection c(server.port());
  json b = {{"prompt", "<|begin_of_text|>x"}, {"max_tokens", 1500}, {"ignore_eos", true},
            {"mode", "full"}};
  const HttpResponse plain = c.request("POST", "/v1/completions", b.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.json()["usage"]["completion_tokens"], 1500);
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  const HttpResponse streamed = c.request("POST", "/v1/completions", b.dump());
  ASSERT_EQ(streamed.status, 200);
  const std::vector<std::string> events = sse_events(streamed.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 1500);
  // The keep-alive connection still takes a request (its idle time began at the reply).
  EXPECT_EQ(c.request("GET", "/health").status, 200);
}

TEST(serve_read_timeout, sigterm_does_not_wait_for_connections_that_wait_for_a_request) {
  ServerProcess server;  // the default read timeout (30 s) and drain (30 s)
  HttpConnection mid_body(server.port()), mid_headers(server.port()), kept(server.port());
  mid_body.send_raw(kShortBody);
  mid_headers.send_raw("GET /health HTTP/1.1\r\nHo");
  EXPECT_EQ(kept.request("GET", "/health").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = clock_type::now();
  server.signal(SIGTERM);
  // Each part-sent request is told the server is going (it may be sent again elsewhere).
  for (HttpConnection* c : {&mid_body, &mid_headers}) {
    c->set_read_timeout(10);
    const HttpResponse r = c->read();
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.headers.count("retry-after") ? r.headers.at("retry-after") : "", "1");
  }
  EXPECT_EQ(server.wait_exit(10.0), 0);
  EXPECT_LT(seconds_since(t0), 5.0);
}

}  // namespace
}  // namespace vc::test

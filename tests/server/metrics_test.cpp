// GET /metrics: Prometheus text whose counts agree with what was sent and answered.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

// The value of the series `series` ("name" or "name{labels}"), or -1.
double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return -1;
}

TEST(serve_metrics, counts_agree_with_the_requests_sent) {
  ServerProcess server;
  const int port = server.port();
  size_t prompt = 0, drafted = 0, accepted = 0, rounds = 0;
  const std::vector<json> bodies = {
      {{"prompt", "<|begin_of_text|>def add(a, b):"}, {"max_tokens", 16}, {"mode", "vericache"}},
      {{"prompt", "<|begin_of_text|>import os\n"}, {"max_tokens", 16}, {"mode", "vericache"},
       {"compressor", "kivi"}, {"ratio", 8}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
      {{"prompt", "<|begin_of_text|>class A:"}, {"max_tokens", 16}, {"mode", "full"}, {"ignore_eos", true}},
  };
  for (const json& b : bodies) {
    const HttpResponse r = http_request(port, "POST", "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json j;
    if (b.value("stream", false)) {
      const auto events = sse_events(r.body);
      j = json::parse(events[events.size() - 2]);  // the usage chunk
    } else {
      j = r.json();
    }
    ASSERT_EQ(j["usage"]["completion_tokens"], 16);
    prompt += j["usage"]["prompt_tokens"].get<size_t>();
    drafted += j["vericache"].value("drafted_tokens", size_t(0));
    accepted += j["vericache"].value("accepted_tokens", size_t(0));
    rounds += j["vericache"].value("rounds", size_t(0));
  }
  const HttpResponse m = http_request(port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.headers.at("content-type").rfind("text/plain", 0), 0u);
  const std::string& t = m.body;
  EXPECT_EQ(metric(t, "vericache:generation_tokens_total"), 48);
  EXPECT_EQ(metric(t, "vericache:prompt_tokens_total"), double(prompt));
  EXPECT_EQ(metric(t, "vericache:num_requests_running"), 0);
  EXPECT_EQ(metric(t, "vericache:num_requests_waiting"), 0);
  EXPECT_EQ(metric(t, "vericache:request_success_total{finished_reason=\"length\"}"), 3);
  EXPECT_EQ(metric(t, "vericache:engine_requests_total{outcome=\"completed\"}"), 3);
  EXPECT_EQ(metric(t, "vericache:time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(metric(t, "vericache:time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(metric(t, "vericache:inter_token_latency_seconds_count"), 45);
  EXPECT_EQ(metric(t, "vericache:e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(metric(t, "vericache:spec_decode_num_draft_tokens_total"), double(drafted));
  EXPECT_EQ(metric(t, "vericache:spec_decode_num_accepted_tokens_total"), double(accepted));
  ASSERT_GT(accepted, 0u);
  // Position 0 is accepted in at most every round; the positions add up to all accepted.
  double per_pos = 0;
  for (int p = 0; p < 4096; ++p) {
    const double v = metric(t, "vericache:spec_decode_num_accepted_tokens_per_pos{position=\"" +
                                   std::to_string(p) + "\"}");
    if (v < 0) break;
    if (p == 0) {
      EXPECT_LE(v, double(rounds));
    }
    per_pos += v;
  }
  EXPECT_EQ(per_pos, double(accepted));
  EXPECT_GT(metric(t, "vericache:fast_memory_budget_bytes"), 0);
  EXPECT_GT(metric(t, "vericache:fast_memory_peak_bytes"), 0);
  EXPECT_GT(metric(t, "vericache:full_tier_bytes_written_total"), 0);
  EXPECT_GE(metric(t, "vericache:resource_busy_fraction{resource=\"drafter\"}"), 0);
}

TEST(serve_metrics, placement_auto_reports_each_actor_bound_as_planned) {
  ServerProcess plain;
  EXPECT_EQ(http_request(plain.port(), "GET", "/metrics").body.find("thread_placement"), std::string::npos);
  ServerProcess server({"--tp", "2", "--placement", "auto"});
  const HttpResponse r = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  for (const char* actor : {"drafter rank 0", "verifier rank 0", "mover rank 0", "drafter rank 1",
                            "verifier rank 1", "mover rank 1"})
    EXPECT_EQ(metric(r.body, std::string("vericache:thread_placement_applied{actor=\"") + actor + "\"}"), 1)
        << actor << "\n" << r.body;
}

}  // namespace
}  // namespace vc::test

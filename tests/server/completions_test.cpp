// `vericache serve` over a real socket: completion text (plain and streamed) equals
// `vericache generate` for the same request, in every mode; SSE framing; keep-alive.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

const std::string kPrompt = "<|begin_of_text|>def fibonacci(n):";

struct Case {
  std::string mode, compressor, draft;
  double ratio = 4, temperature = 0;
  int top_k = 0;
  uint64_t seed = 0;
  int max_tokens = 24;
};

json body_of(const Case& c, bool stream) {
  json b = {{"model", "tinycode"}, {"prompt", kPrompt},        {"max_tokens", c.max_tokens},
            {"mode", c.mode},      {"compressor", c.compressor}, {"ratio", c.ratio},
            {"draft", c.draft},    {"temperature", c.temperature}, {"top_k", c.top_k},
            {"seed", c.seed}};
  if (stream) b["stream"] = true;
  return b;
}

std::string generate_text(const Case& c) {
  const CliRun r = run_vericache(
      "generate --json --prompt '" + kPrompt + "' --max-tokens " + std::to_string(c.max_tokens) +
          " --mode " + c.mode + " --compressor " + c.compressor + " --ratio " +
          std::to_string(c.ratio) + " --draft " + c.draft + " --temperature " +
          std::to_string(c.temperature) + " --top-k " + std::to_string(c.top_k) + " --seed " +
          std::to_string(c.seed),
      false);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out)["text"].get<std::string>();
}

// The concatenated deltas of a completion stream; checks its framing on the way.
std::string stream_text(const std::string& body, std::string* finish = nullptr) {
  const std::vector<std::string> events = sse_events(body);
  EXPECT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["object"], "text_completion");
    if (e["choices"].empty()) continue;  // the usage chunk
    text += e["choices"][0]["text"].get<std::string>();
    if (finish != nullptr && !e["choices"][0]["finish_reason"].is_null())
      *finish = e["choices"][0]["finish_reason"];
  }
  return text;
}

TEST(serve, completion_text_equals_generate_in_every_mode_plain_and_streamed) {
  ServerProcess server;
  const std::vector<Case> cases = {
      {"full", "snapkv", "16"},
      {"vericache", "snapkv", "8", 4},
      {"vericache", "kivi", "auto", 8, 0.8, 40, 7},
      {"lossy", "streaming_llm", "16", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode + "/" + c.compressor);
    const std::string expected = generate_text(c);
    ASSERT_FALSE(expected.empty());
    const HttpResponse plain = http_request(server.port(), "POST", "/v1/completions",
                                            body_of(c, false).dump());
    ASSERT_EQ(plain.status, 200) << plain.body;
    const json j = plain.json();
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], expected);
    EXPECT_EQ(j["usage"]["completion_tokens"], c.max_tokens);
    EXPECT_EQ(j["vericache"]["mode"], c.mode);
    if (c.mode == "vericache") {
      EXPECT_GT(j["vericache"]["rounds"].get<int>(), 0);
    }

    const HttpResponse streamed = http_request(server.port(), "POST", "/v1/completions",
                                               body_of(c, true).dump());
    ASSERT_EQ(streamed.status, 200);
    EXPECT_EQ(streamed.headers.at("content-type"), "text/event-stream");
    std::string finish;
    EXPECT_EQ(stream_text(streamed.body, &finish), expected);
    EXPECT_EQ(finish, "length");
  }
}

TEST(serve, stream_with_include_usage_ends_with_a_usage_chunk_then_done) {
  ServerProcess server;
  const json b = {{"prompt", kPrompt}, {"max_tokens", 12}, {"stream", true},
                  {"stream_options", {{"include_usage", true}}}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200);
  const std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  EXPECT_EQ(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"].get<int>() + 12);
  EXPECT_TRUE(usage.contains("vericache"));
}

TEST(serve, sampling_without_a_seed_draws_a_fresh_one_each_time_and_names_it_for_a_rerun) {
  ServerProcess server;
  json b = {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0.9}, {"mode", "vericache"}};
  const HttpResponse first = http_request(server.port(), "POST", "/v1/completions", b.dump());
  const HttpResponse second = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_EQ(second.status, 200) << second.body;
  const json f = first.json(), g = second.json();
  ASSERT_TRUE(f["vericache"]["seed"].is_number_unsigned()) << f["vericache"];
  EXPECT_NE(f["vericache"]["seed"], g["vericache"]["seed"]);
  // The seed it names gives the same completion again.
  b["seed"] = f["vericache"]["seed"];
  const HttpResponse again = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json()["choices"][0]["text"], f["choices"][0]["text"]);
  EXPECT_EQ(again.json()["vericache"]["seed"], f["vericache"]["seed"]);
}

TEST(serve, stop_strings_cut_plain_and_streamed_text_alike) {
  ServerProcess server;
  json b = {{"prompt", kPrompt}, {"max_tokens", 24}, {"mode", "vericache"}};
  const HttpResponse free_run = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  const std::string full = free_run.json()["choices"][0]["text"];
  ASSERT_GE(full.size(), 12u);
  const std::string stop = full.substr(full.size() / 2, 3);  // somewhere in the middle
  b["stop"] = json::array({stop});
  const HttpResponse plain = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string text = plain.json()["choices"][0]["text"];
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(plain.json()["choices"][0]["finish_reason"], "stop");
  b["stream"] = true;
  const HttpResponse streamed = http_request(server.port(), "POST", "/v1/completions", b.dump());
  std::string finish;
  EXPECT_EQ(stream_text(streamed.body, &finish), text);
  EXPECT_EQ(finish, "stop");
}

TEST(serve, token_id_prompts_and_logprobs_match_generate) {
  ServerProcess server;
  const CliRun g = run_vericache("generate --json --logprobs --prompt '" + kPrompt +
                                     "' --max-tokens 8 --mode full",
                                 false);
  ASSERT_EQ(g.code, 0);
  const json ref = json::parse(g.out);
  const json b = {{"prompt", ref["prompt_ids"]}, {"max_tokens", 8}, {"logprobs", 0},
                  {"mode", "full"}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = r.json()["choices"][0]["logprobs"];
  EXPECT_EQ(r.json()["choices"][0]["text"], ref["text"]);
  ASSERT_EQ(lp["token_logprobs"].size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), ref["output_logprobs"][i].get<double>(),
                1e-6);
}

TEST(serve, keeps_the_connection_alive_across_requests) {
  ServerProcess server;
  HttpConnection c(server.port());
  EXPECT_EQ(c.request("GET", "/health").status, 200);
  const HttpResponse models = c.request("GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["data"][0]["id"], "tinycode");
  const json b = {{"prompt", kPrompt}, {"max_tokens", 4}, {"stream", true}};
  EXPECT_EQ(c.request("POST", "/v1/completions", b.dump()).status, 200);
  EXPECT_EQ(c.request("POST", "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 4}}.dump())
                .status,
            200);
}

TEST(serve, an_http_1_0_client_gets_a_stream_without_chunks_that_ends_when_the_server_closes) {
  ServerProcess server;
  const json b = {{"prompt", kPrompt}, {"max_tokens", 8}, {"stream", true}};
  HttpConnection c(server.port());
  c.set_version("HTTP/1.0");
  const HttpResponse r = c.request("POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.count("transfer-encoding"), 0u) << "HTTP/1.0 knows no chunked encoding";
  EXPECT_EQ(r.headers.count("content-length"), 0u);
  const HttpResponse plain = http_request(server.port(), "POST", "/v1/completions",
                                          json{{"prompt", kPrompt}, {"max_tokens", 8}}.dump());
  EXPECT_EQ(stream_text(r.body), plain.json()["choices"][0]["text"]);
  EXPECT_TRUE(c.closed_by_peer(5)) << "the close marks the end of the body";
}

TEST(serve, curl_gets_the_same_completion_as_a_socket_client) {
  if (std::system("command -v curl >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "curl is not installed (tools/setup.sh installs it)";
  ServerProcess server;
  const json b = {{"prompt", kPrompt}, {"max_tokens", 10}};
  const std::string cmd = "curl -s http://127.0.0.1:" + std::to_string(server.port()) +
                          "/v1/completions -H 'Content-Type: application/json' -d '" + b.dump() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0);
  const HttpResponse direct = http_request(server.port(), "POST", "/v1/completions", b.dump());
  EXPECT_EQ(json::parse(out)["choices"][0]["text"], direct.json()["choices"][0]["text"]);
}

}  // namespace
}  // namespace vc::test

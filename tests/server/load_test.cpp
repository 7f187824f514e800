// A bounded load test: 64 concurrent streaming clients with mixed modes, compressors
// and sampling against one server; every stream is complete ([DONE], a finish
// reason) and equals the offline result of `vericache batch` for the same request,
// and the metrics agree with what was sent.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kClients = 64;

json request_of(int i) {
  static const char* prompts[] = {"<|begin_of_text|>def add(a, b):", "<|begin_of_text|>import os\n",
                                  "<|begin_of_text|>class Stack:", "<|begin_of_text|>for i in range("};
  json r = {{"prompt", prompts[i % 4]}, {"max_tokens", 10 + i % 5}};
  switch (i % 5) {
    case 0: r["mode"] = "full"; break;
    case 1: r.update({{"mode", "vericache"}, {"compressor", "snapkv"}, {"ratio", 4}, {"draft", 8}}); break;
    case 2: r.update({{"mode", "vericache"}, {"compressor", "kivi"}, {"ratio", 8}, {"draft", "auto"}}); break;
    case 3: r.update({{"mode", "lossy"}, {"compressor", "streaming_llm"}, {"ratio", 2}}); break;
    case 4:
      r.update({{"mode", "vericache"}, {"compressor", "h2o"}, {"ratio", 4}, {"draft", 16},
                {"temperature", 0.7}, {"top_k", 50}, {"seed", 1000 + i}});
      break;
  }
  return r;
}

// The offline texts: one `vericache batch` run over the same requests.
std::vector<std::string> offline_texts() {
  const fs::path dir = fs::temp_directory_path() / ("vc-load-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < kClients; ++i) in << request_of(i).dump() << "\n";
  }
  const CliRun r = run_vericache("batch --input " + (dir / "in.jsonl").string() + " --output " +
                                     (dir / "out.jsonl").string(),
                                 false);
  EXPECT_EQ(r.code, 0);
  std::vector<std::string> texts;
  std::ifstream out(dir / "out.jsonl");
  std::string line;
  while (std::getline(out, line)) texts.push_back(json::parse(line)["text"].get<std::string>());
  fs::remove_all(dir);
  return texts;
}

struct StreamResult {
  int status = 0;
  std::string text, finish;
  bool done = false;
  size_t completion_tokens = 0;
};

TEST(serve_load, concurrent_mixed_streams_each_equal_their_offline_result) {
  const std::vector<std::string> expected = offline_texts();
  ASSERT_EQ(expected.size(), size_t(kClients));
  ServerProcess server({"--max-concurrency", "8", "--max-queue", "64"});
  std::vector<StreamResult> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      json b = request_of(i);
      b["stream"] = true;
      b["stream_options"] = {{"include_usage", true}};
      const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
      StreamResult& g = got[size_t(i)];
      g.status = r.status;
      for (const std::string& e : sse_events(r.body)) {
        if (e == "[DONE]") {
          g.done = true;
          continue;
        }
        const json j = json::parse(e);
        if (j.contains("usage") && j["usage"].is_object())
          g.completion_tokens = j["usage"]["completion_tokens"];
        if (j["choices"].empty()) continue;
        g.text += j["choices"][0]["text"].get<std::string>();
        if (!j["choices"][0]["finish_reason"].is_null()) g.finish = j["choices"][0]["finish_reason"];
      }
    });
  for (auto& t : clients) t.join();
  size_t tokens = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i) + ": " + request_of(i).dump());
    const StreamResult& g = got[size_t(i)];
    EXPECT_EQ(g.status, 200);
    EXPECT_TRUE(g.done);
    EXPECT_FALSE(g.finish.empty());
    EXPECT_EQ(g.text, expected[size_t(i)]);
    tokens += g.completion_tokens;
  }
  const std::string m = http_request(server.port(), "GET", "/metrics").body;
  EXPECT_NE(m.find("vericache:generation_tokens_total " + std::to_string(tokens) + "\n"),
            std::string::npos);
  EXPECT_NE(m.find("vericache:engine_requests_total{outcome=\"completed\"} " +
                   std::to_string(kClients) + "\n"),
            std::string::npos);
  EXPECT_NE(m.find("vericache:time_to_first_token_seconds_count " + std::to_string(kClients) + "\n"),
            std::string::npos);
  EXPECT_NE(m.find("vericache:num_requests_running 0\n"), std::string::npos);
  EXPECT_NE(m.find("vericache:fast_memory_reserved_bytes 0\n"), std::string::npos);  // no request holds any
  EXPECT_NE(m.find("vericache:full_tier_bytes_held 0\n"), std::string::npos);
}

}  // namespace
}  // namespace vc::test

// `vericache serve --remote redis://...` against a real redis-server: a completion's
// text equals `vericache generate` for the same request, both before the store holds
// the prompt's prefix and after (when the response's stats show the hit), in the
// compressed-first flow and in the full flow recomputing the front.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvtiers/remote/redis_client.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

std::string long_prompt() {
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 40; ++i)
    p += "def g" + std::to_string(i) + "(y):\n    return y - " + std::to_string(i) + "\n\n";
  return p + "def main():";
}

size_t stored_chunks(const std::string& url) {
  RedisClient c(parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "100000"});
  return scan.elements.at(1).elements.size();
}

// `generate`'s text for the request the tests send.
std::string generate_text(const std::string& prompt) {
  const std::string file = "/tmp/vc-serve-remote-" + std::to_string(::getpid()) + ".txt";
  { std::ofstream(file) << prompt; }
  const CliRun g = run_vericache("generate --json --prompt-file " + file +
                                     " --max-tokens 16 --mode vericache --compressor snapkv "
                                     "--ratio 4 --draft 6 --ignore-eos",
                                 false);
  ::unlink(file.c_str());
  EXPECT_EQ(g.code, 0) << g.out;
  return json::parse(g.out)["text"].get<std::string>();
}

json completion_body(const std::string& prompt) {
  return {{"prompt", prompt}, {"max_tokens", 16}, {"mode", "vericache"},
          {"compressor", "snapkv"}, {"ratio", 4}, {"draft", "6"}, {"ignore_eos", true}};
}

// Publishing is write-behind: wait until the store holds what `published` queued.
void wait_published(const RedisServer& store, const json& published) {
  const size_t all = published["chunks_published"].get<size_t>() +
                     published["compressed_chunks_published"].get<size_t>();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stored_chunks(store.url()) < all && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(stored_chunks(store.url()), all);
}

TEST(serve_remote, completion_text_equals_generate_before_and_after_the_store_holds_the_prefix_compressed_first) {
  RedisServer store;
  VC_REQUIRE_REDIS(store);
  const std::string prompt = long_prompt();
  const std::string expected = generate_text(prompt);

  ServerProcess server({"--remote", store.url(), "--remote-chunk", "64"});
  const json body = completion_body(prompt);
  const HttpResponse cold = http_request(server.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(cold.json()["choices"][0]["text"], expected);
  EXPECT_EQ(cold.json()["vericache"]["remote"]["chunks_hit"], 0);
  const json published = cold.json()["vericache"]["remote"];
  ASSERT_GE(published["compressed_chunks_published"].get<int>(), 3) << published;
  wait_published(store, published);

  const HttpResponse warm = http_request(server.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(warm.status, 200) << warm.body;
  const json j = warm.json();
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_GE(j["vericache"]["remote"]["chunks_hit"].get<int>(), 3) << j["vericache"];
  // The engine drafted from the compressed chunks first (serve's default flow).
  EXPECT_TRUE(j["vericache"]["remote"]["compressed_first"].get<bool>()) << j["vericache"];
  EXPECT_EQ(j["vericache"]["remote"]["compressed_chunks_hit"], published["compressed_chunks_published"]);
}

TEST(serve_remote, completion_text_equals_generate_with_the_front_recomputed_while_the_back_is_fetched) {
  RedisServer store;
  VC_REQUIRE_REDIS(store);
  const std::string prompt = long_prompt();
  const std::string expected = generate_text(prompt);

  ServerProcess server({"--remote", store.url(), "--remote-chunk", "64", "--remote-flow", "full",
                        "--remote-recompute-front"});
  const json body = completion_body(prompt);
  const HttpResponse cold = http_request(server.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(cold.json()["choices"][0]["text"], expected);
  const json published = cold.json()["vericache"]["remote"];
  EXPECT_EQ(published["chunks_hit"], 0) << published;
  ASSERT_GE(published["chunks_published"].get<int>(), 3) << published;
  wait_published(store, published);

  const HttpResponse warm = http_request(server.port(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(warm.status, 200) << warm.body;
  const json j = warm.json();
  const json& rs = j["vericache"]["remote"];
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_FALSE(rs["compressed_first"].get<bool>()) << rs;
  // The front and the back together cover the cached prefix (whole chunks).
  const size_t covered = rs["positions_hit"].get<size_t>() + rs["front_recomputed"].get<size_t>();
  EXPECT_GE(covered, 3u * 64) << rs;
  EXPECT_EQ(covered % 64, 0u) << rs;
}

}  // namespace
}  // namespace vc::test

// `vericache batch --remote redis://...` against a real redis-server: a second run
// of the same lines takes their prompts' prefixes from the store (its stats say how
// much), and every line's tokens and logprobs equal `batch` without --remote.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/cli/generate_json.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A prompt of several hundred tokens.
std::string long_prompt() {
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 14; ++i)
    p += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + " + " +
         std::to_string(i * 3) + "\n\n";
  return p + "class Stack:\n    def push(self, item):";
}

struct Dir {
  fs::path path = fs::temp_directory_path() / ("vc-batch-remote-" + std::to_string(::getpid()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
};

std::vector<json> run_batch(const Dir& d, const std::string& name, const std::string& extra) {
  const fs::path out = d.path / (name + ".jsonl");
  const auto r = vc::test::run_vericache("batch --input " + (d.path / "in.jsonl").string() +
                                             " --output " + out.string() + extra,
                                         true);
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(out);
  std::vector<json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
  return lines;
}

TEST(cli_batch_remote, a_second_run_hits_the_store_and_outputs_equal_batch_without_it) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const std::string p = long_prompt();
  {
    std::ofstream in(d.path / "in.jsonl");
    in << json{{"prompt", p}, {"max_tokens", 20}, {"mode", "vericache"}, {"compressor", "snapkv"},
               {"draft", 6}, {"logprobs", true}, {"ignore_eos", true}}.dump()
       << "\n"
       << json{{"prompt", p}, {"max_tokens", 20}, {"mode", "lossy"}, {"compressor", "kivi"},
               {"temperature", 0.7}, {"top_k", 40}, {"seed", 5}, {"logprobs", true},
               {"ignore_eos", true}}.dump()
       << "\n"
       << json{{"prompt", p}, {"max_tokens", 8}, {"mode", "full"}, {"logprobs", true},
               {"ignore_eos", true}}.dump()
       << "\n";
  }
  const std::string remote = " --remote " + server.url() + " --remote-chunk 64";
  const auto local = run_batch(d, "local", "");
  const auto cold = run_batch(d, "cold", remote);
  // The first run's chunks were sent at its exit; the second fetches a chunk per fetch.
  const auto warm = run_batch(d, "warm", remote + " --remote-fetch-segment 1");
  ASSERT_EQ(local.size(), 3u);
  ASSERT_EQ(cold.size(), 3u);
  ASSERT_EQ(warm.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1));
    for (const auto* run : {&cold, &warm}) {
      EXPECT_EQ(local[i]["output_ids"], (*run)[i]["output_ids"]);
      EXPECT_EQ(local[i]["output_logprobs"], (*run)[i]["output_logprobs"]);
    }
    EXPECT_FALSE(local[i]["stats"].contains("remote"));
  }
  // The SnapKV line's view is cut into chunks; KIVI's default groups straddle the
  // chunk boundaries on this prompt, so its view is not published (README).
  EXPECT_GE(cold[0]["stats"]["remote"]["compressed_chunks_published"].get<int>(), 3)
      << cold[0]["stats"]["remote"];
  for (size_t i = 0; i < 2; ++i) {
    const json& rs = warm[i]["stats"]["remote"];
    EXPECT_GE(rs["chunks_hit"].get<int>(), 3) << rs;
    EXPECT_EQ(rs["positions_hit"].get<int>(), 64 * rs["chunks_hit"].get<int>()) << rs;
    EXPECT_GT(rs["bytes_fetched_full"].get<double>(), 0) << rs;
    EXPECT_GE(rs["fetch_segments"].get<int>(), rs["chunks_hit"].get<int>()) << "one chunk per fetch: " << rs;
    EXPECT_EQ(rs["url"], server.url());
  }
  EXPECT_FALSE(warm[2]["stats"].contains("remote")) << "full mode never asks the store";
}

TEST(cli_batch_remote, the_views_batch_publishes_start_the_compressed_first_flow_of_generate_and_batch) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const std::string p = long_prompt();
  {
    std::ofstream in(d.path / "in.jsonl");
    in << json{{"prompt", p}, {"max_tokens", 16}, {"mode", "vericache"}, {"compressor", "snapkv"},
               {"ratio", 4}, {"draft", 6}, {"ignore_eos", true}}.dump()
       << "\n";
    std::ofstream(d.path / "prompt.txt") << p;
  }
  const std::string remote = " --remote " + server.url() + " --remote-chunk 64";
  const auto published = run_batch(d, "publish", remote);  // its chunks are sent at its exit
  ASSERT_EQ(published.size(), 1u);
  const json& ps = published[0]["stats"]["remote"];
  EXPECT_EQ(ps["chunks_hit"], 0) << ps;
  EXPECT_GE(ps["compressed_chunks_published"].get<int>(), 3) << ps;

  const std::string base = "--prompt-file " + (d.path / "prompt.txt").string() +
                           " --max-tokens 16 --json --logprobs --ignore-eos";
  const json full = vc::test::generate_json(base);
  const json warm = vc::test::generate_json(base + " --mode vericache --compressor snapkv --ratio 4 --draft 6" + remote);
  vc::test::expect_same_tokens(full, warm, "compressed first from batch's chunks");
  const json& rs = warm["stats"]["remote"];
  EXPECT_TRUE(rs["compressed_first"].get<bool>()) << rs;
  EXPECT_EQ(rs["compressed_chunks_hit"], ps["compressed_chunks_published"]) << rs;
  EXPECT_GE(rs["chunks_hit"].get<int>(), 3) << rs;

  // batch itself starts from them (the engine's compressed-first flow), and with
  // --remote-flow full it does not; both emit full decoding's tokens.
  for (const std::string flow : {"compressed-first", "full"}) {
    const auto again = run_batch(d, "again-" + flow, remote + " --remote-flow " + flow);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(full["output_ids"], again[0]["output_ids"]) << flow;
    const json& as = again[0]["stats"]["remote"];
    EXPECT_EQ(as["flow"], flow);
    EXPECT_EQ(as["compressed_first"].get<bool>(), flow == "compressed-first") << as;
    EXPECT_EQ(as["compressed_chunks_hit"].get<int>(),
              flow == "compressed-first" ? ps["compressed_chunks_published"].get<int>() : 0)
        << as;
    EXPECT_GE(as["chunks_hit"].get<int>(), 3) << as;
    EXPECT_TRUE(as.contains("predrafted")) << as;
  }
}

TEST(cli_batch_remote, a_bad_remote_option_is_an_error_naming_it) {
  const auto r = vc::test::run_vericache("batch --input /dev/null --output /dev/null --remote redis://127.0.0.1:1 --remote-chunk 7", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--remote-chunk"), std::string::npos) << r.out;
  for (const std::string bad : {"--remote-fetchers 0", "--remote-flow fast", "--remote-fetch-segment -1",
                                "--remote-compressed-suffix x"}) {
    const auto b = vc::test::run_vericache("batch --input /dev/null --output /dev/null " + bad, true);
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_NE(b.out.find(bad.substr(0, bad.find(' '))), std::string::npos) << b.out;
  }
}

}  // namespace

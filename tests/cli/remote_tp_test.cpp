// `generate --tp 2 --remote redis://...` against a real redis-server: each rank
// fetches and publishes its own shard's chunks, full and compressed; a warm
// request's tokens and logprobs equal full decoding at degree 2 bit for bit, by the
// full flow and compressed first; when one rank's full chunk is missing the ranks
// agree on the shorter prefix (every rank prefills from the same position), and
// when one rank's compressed chunk is missing no view is used.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kvtiers/remote/redis_client.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/cli/prompt_file.hpp"
#include "tests/cli/generate_json.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace {

using nlohmann::json;
using vc::test::expect_same_tokens;

// A prompt of a few hundred tokens in a temporary file (removed on destruction).
std::string code_prompt() {  // a few hundred tokens of code
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 10; ++i)
    p += "def h" + std::to_string(i) + "(z):\n    return z + " + std::to_string(i) + " * " +
         std::to_string(i + 5) + "\n\n";
  return p + "class Queue:\n    def pop(self):";
}

// Blocks of 16 positions (the default is 64): the prompt of a few hundred tokens then
// spans many 32-token remote chunks (a chunk is whole blocks).
json generate(const std::string& args) {
  return vc::test::generate_json(args + " --block-tokens 16");
}

std::vector<std::string> chunk_keys(const std::string& url, const std::string& kind = "full") {
  vc::RedisClient c(vc::parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:" + kind + ":*", "COUNT", "10000"});
  std::vector<std::string> keys;
  for (const auto& k : scan.elements[1].elements) keys.push_back(k.str);
  return keys;
}

TEST(remote_tp, each_rank_fetches_its_own_chunks_and_the_tokens_equal_full_decoding) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32 --remote-flow full";
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 3"}) {
    const std::string base = "--prompt-file " + prompt.path +
                             " --max-tokens 20 --json --logprobs --ignore-eos --tp 2" + sampling;
    const json full = generate(base + " --mode full");
    for (const std::string mode : {" --mode vericache --compressor snapkv --ratio 4 --draft 6",
                                   " --mode vericache --compressor kivi --ratio 4 --draft auto"}) {
      ASSERT_EQ(vc::test::run_vericache("cache clear --remote " + server.url(), false).code, 0);
      const json cold = generate(base + mode + remote);
      expect_same_tokens(full, cold, "cold" + mode + sampling);
      const int published = cold["stats"]["remote"]["chunks_published"].get<int>();
      EXPECT_GT(published, 3) << cold["stats"]["remote"];
      // KIVI's groups straddle these 32-token chunks: its views are not cut into chunks.
      if (mode.find("snapkv") != std::string::npos) {
        EXPECT_GT(cold["stats"]["remote"]["compressed_chunks_published"].get<int>(), 0) << "each rank's own";
      }
      // Two ranks, each its own keys: twice the chunks of one rank.
      EXPECT_EQ(chunk_keys(server.url()).size(), size_t(2 * published));
      const json warm = generate(base + mode + remote);
      expect_same_tokens(full, warm, "warm" + mode + sampling);
      const json& rs = warm["stats"]["remote"];
      // Every chunk before snapkv's window (the window stays local).
      EXPECT_GT(rs["chunks_hit"].get<int>(), 3) << rs;
      EXPECT_GE(rs["chunks_hit"].get<int>(), published - 1) << rs;
      EXPECT_FALSE(rs["compressed_first"].get<bool>()) << "--remote-flow full";
      // Only what the fetch could not take (chunks in snapkv's window) is sent again.
      EXPECT_EQ(rs["chunks_published"].get<int>(), published - rs["chunks_hit"].get<int>()) << rs;
    }
  }
}

TEST(remote_tp, compressed_first_drafts_from_each_ranks_view_and_the_tokens_equal_full_decoding) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), 200e3);  // 200 KB/s
  const std::string slow_remote = " --remote " + slow.url() + " --remote-chunk 32 --remote-timeout-ms 60000";
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 3"}) {
    const std::string base = "--prompt-file " + prompt.path +
                             " --max-tokens 20 --json --logprobs --ignore-eos --tp 2" + sampling;
    const json full = generate(base + " --mode full");
    // LaProx ranks tokens across every rank's heads: the ranks' views still agree.
    for (const std::string mode : {" --mode vericache --compressor snapkv --ratio 4 --draft 6",
                                   " --mode vericache --compressor laprox --ratio 4 --draft auto"}) {
      ASSERT_EQ(vc::test::run_vericache("cache clear --remote " + server.url(), false).code, 0);
      const json cold = generate(base + mode + remote);
      expect_same_tokens(full, cold, "cold" + mode + sampling);
      const int views = cold["stats"]["remote"]["compressed_chunks_published"].get<int>();
      ASSERT_GT(views, 0) << cold["stats"]["remote"];
      EXPECT_EQ(chunk_keys(server.url(), "cmp").size(), size_t(2 * views)) << "each rank its own";
      const json warm = generate(base + mode + remote);
      expect_same_tokens(full, warm, "warm" + mode + sampling);
      const json& rs = warm["stats"]["remote"];
      EXPECT_TRUE(rs["compressed_first"].get<bool>()) << rs;
      EXPECT_EQ(rs["compressed_chunks_hit"].get<int>(), views) << rs;
      // Through a slow link the ranks draft together (their "the full chunks are in"
      // decided jointly) while the chunks arrive, with the same bits.
      const json slow_warm = generate(base + mode + slow_remote);
      expect_same_tokens(full, slow_warm, "slow link" + mode + sampling);
      EXPECT_TRUE(slow_warm["stats"]["remote"]["compressed_first"].get<bool>());
      EXPECT_GT(slow_warm["stats"]["remote"]["predrafted"].get<int>(), 0) << slow_warm["stats"]["remote"];
    }
  }
}

TEST(remote_tp, a_compressed_chunk_one_rank_lacks_sends_every_rank_to_the_full_flow) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 16 --json --logprobs --ignore-eos --tp 2";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 6";
  const json full = generate(common + " --mode full");
  (void)generate(base + remote);
  bool disagreed = false;
  vc::RedisClient c(vc::parse_redis_url(server.url()));
  for (const std::string& key : chunk_keys(server.url(), "cmp")) {  // the first chunks' keys
    ASSERT_EQ(c.command({"DEL", key}).integer, 1);
    const json j = generate(base + remote);
    expect_same_tokens(full, j, "without " + key);
    const json& rs = j["stats"]["remote"];
    if (rs["compressed_stop_reason"].get<std::string>().find("compressed prefixes differ") != std::string::npos) {
      EXPECT_FALSE(rs["compressed_first"].get<bool>()) << rs;
      disagreed = true;
      break;
    }
  }
  EXPECT_TRUE(disagreed) << "no deleted compressed chunk was one rank's alone";
}

TEST(remote_tp, a_chunk_one_rank_lacks_makes_every_rank_take_the_shorter_prefix) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 16 --json --logprobs --ignore-eos --tp 2";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 6";
  const json full = generate(common + " --mode full");
  const int all = generate(base + remote)["stats"]["remote"]["chunks_published"].get<int>();
  ASSERT_GT(all, 3);
  // Delete one key at a time (each run republishes it): half are rank 1's, whose
  // loss leaves rank 0 (whose stats these are) with a longer prefix than rank 1.
  bool disagreed = false;
  vc::RedisClient c(vc::parse_redis_url(server.url()));
  for (const std::string& key : chunk_keys(server.url())) {
    ASSERT_EQ(c.command({"DEL", key}).integer, 1);
    const json j = generate(base + remote);
    expect_same_tokens(full, j, "without " + key);
    const json& rs = j["stats"]["remote"];
    EXPECT_LT(rs["chunks_hit"].get<int>(), all) << rs;
    EXPECT_EQ(rs["positions_hit"].get<int>(), 32 * rs["chunks_hit"].get<int>()) << rs;
    if (rs["stop_reason"].get<std::string>().find("ranks' cached prefixes differ") != std::string::npos) {
      disagreed = true;
      break;
    }
  }
  EXPECT_TRUE(disagreed) << "no deleted chunk was rank 1's alone";
}

}  // namespace

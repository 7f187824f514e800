// `--remote redis://...` and `vericache cache` against a real redis-server: a second
// request with the same prompt takes its prefix KV from the store instead of
// prefilling it, and its tokens and logprobs still equal full decoding bit for bit;
// a corrupt store, a store that is down, and a flushed store each cost a recompute,
// never a different token.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/cli/corrupt_chunks.hpp"
#include "tests/cli/prompt_file.hpp"
#include "tests/cli/generate_json.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

using nlohmann::json;

// A prompt of a few hundred tokens in a temporary file (removed on destruction).
std::string code_prompt() {  // a few hundred tokens of code
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 12; ++i)
    p += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + " + " +
         std::to_string(i * 3) + "\n\n";
  return p + "class Stack:\n    def push(self, item):";
}

using vc::test::expect_same_tokens;

// Blocks of 16 positions (the default is 64): the prompt of a few hundred tokens then
// spans many 32-token remote chunks (a chunk is whole blocks).
constexpr const char* kSmallBlocks = " --block-tokens 16";
json generate(const std::string& args) { return vc::test::generate_json(args + kSmallBlocks); }

using vc::test::corrupt_every_chunk;

TEST(remote_cache, a_remote_prefix_hit_gives_the_tokens_and_logprobs_of_full_decoding) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 11"}) {
    const std::string base = "--prompt-file " + prompt.path +
                             " --max-tokens 24 --json --logprobs --ignore-eos" + sampling;
    const json full = generate(base);
    for (const std::string mode : {" --mode vericache --compressor snapkv --ratio 4 --draft 8",
                                   " --mode vericache --compressor kivi --ratio 4 --draft 8"}) {
      const json cold = generate(base + mode + remote);
      const json warm = generate(base + mode + remote);
      expect_same_tokens(full, cold, "cold" + mode);
      expect_same_tokens(full, warm, "warm" + mode);
      const json& rs = warm["stats"]["remote"];
      EXPECT_GT(rs["chunks_hit"].get<int>(), 3) << rs;
      EXPECT_EQ(rs["positions_hit"].get<int>(), 32 * rs["chunks_hit"].get<int>());
      EXPECT_GT(rs["bytes_fetched_full"].get<double>(), 0);
      EXPECT_GT(warm["stats"]["time_to_first_token_seconds"].get<double>(), 0);
    }
  }
  const auto cli = vc::test::run_vericache("cache stats --json --remote " + server.url(), false);
  ASSERT_EQ(cli.code, 0) << cli.out;
  EXPECT_GT(json::parse(cli.out)["full_chunks"].get<int>(), 3);
}

TEST(remote_cache, a_corrupt_flushed_or_dead_store_means_recompute_and_the_same_tokens) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 24 --json --logprobs --ignore-eos";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 8";
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const json full = generate(common);
  (void)generate(base + remote);  // publishes

  corrupt_every_chunk(server.url());
  json j = generate(base + remote);
  expect_same_tokens(full, j, "corrupt");
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);
  EXPECT_NE(j["stats"]["remote"]["stop_reason"].get<std::string>().find("checksum"), std::string::npos)
      << j["stats"]["remote"];
  // That request republished good chunks over the corrupt ones.
  EXPECT_GT(generate(base + remote)["stats"]["remote"]["chunks_hit"].get<int>(), 3);

  auto r = vc::test::run_vericache("cache clear --remote " + server.url(), false);
  EXPECT_EQ(r.code, 0) << r.out;
  j = generate(base + remote);
  expect_same_tokens(full, j, "cleared");
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);

  server.kill();
  j = generate(base + remote);
  expect_same_tokens(full, j, "store down");
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);
  EXPECT_NE(j["stats"]["remote"]["stop_reason"].get<std::string>().find("cannot connect"), std::string::npos);
  r = vc::test::run_vericache("cache stats --timeout-ms 300 --remote " + server.url(), true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(server.url()), std::string::npos) << r.out;
}

TEST(remote_cache, cache_commands_refuse_a_timeout_that_is_not_positive) {
  for (const char* sub : {"stats", "clear"}) {
    for (const char* t : {"0", "-5"}) {
      const auto r = vc::test::run_vericache(std::string("cache ") + sub +
                                                 " --remote redis://127.0.0.1:1 --timeout-ms " + t,
                                             true);
      EXPECT_NE(r.code, 0) << sub << " " << t << ": " << r.out;
      EXPECT_NE(r.out.find("--timeout-ms"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("timed out"), std::string::npos) << "not tried: " << r.out;
    }
  }
}

TEST(remote_cache, options_a_full_decoding_run_does_not_use_are_named_in_a_warning) {
  const auto r = vc::test::run_vericache(
      "generate --prompt x --max-tokens 1 --mode full --remote redis://127.0.0.1:1 --disk-dir /tmp", true);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--remote is not used with --mode full"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--disk-dir is not used without --full-tier disk"), std::string::npos) << r.out;
  const auto used = vc::test::run_vericache("generate --prompt x --max-tokens 1 --mode full", true);
  EXPECT_EQ(used.out.find("not used"), std::string::npos) << used.out;
  // batch said nothing (serve shares the line).
  const auto batch = vc::test::run_vericache("batch --input /dev/null --output /dev/null --disk-dir /tmp", true);
  EXPECT_EQ(batch.code, 0) << batch.out;
  EXPECT_NE(batch.out.find("--disk-dir is not used without --full-tier disk"), std::string::npos) << batch.out;
}

TEST(remote_cache, a_bad_remote_url_is_a_one_line_error) {
  const auto r = vc::test::run_vericache(
      "generate --prompt x --mode vericache --remote http://localhost:1", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'http://localhost:1' is not a redis://HOST:PORT URL"), std::string::npos) << r.out;
}

}  // namespace

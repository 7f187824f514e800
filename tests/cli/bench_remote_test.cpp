// `vericache bench remote` against a real redis-server: every flow (generate's and
// the engine's) runs for every length and equals full decoding (the bench fails otherwise); its JSON names the
// link's rates, the proxy's measured; a bad store URL is a one-line error.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

TEST(bench_remote, runs_every_flow_at_every_length_and_states_the_link_rates) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const auto r = vc::test::run_vericache(
      "bench remote --remote " + server.url() +
          " --lengths 200 300 --remote-chunk 64 --max-tokens 6 --local-bandwidth 2e8 --json",
      false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["local_bytes_per_second"].get<double>(), 2e8);
  EXPECT_DOUBLE_EQ(j["remote_bytes_per_second"].get<double>(), 2e8 * 1.2 / 40);
  EXPECT_NE(j["link"].get<std::string>().find("throttled by an in-process TCP proxy"), std::string::npos);
  EXPECT_EQ(j["remote_link"], "proxy");
  // The link probe reads through the proxy, at its pace (6 MB/s here).
  const double measured = j["remote_measured_bytes_per_second"].get<double>();
  EXPECT_GT(measured, 0.6 * 6e6) << measured;
  EXPECT_LT(measured, 1.1 * 6e6) << measured;
  ASSERT_EQ(j["runs"].size(), 18u);
  const char* flows[9] = {"recompute",         "full first",        "compressed first",
                          "compressed first 1 round", "engine full first", "engine compressed first",
                          "full first, full decode", "full first, recompute front", "engine full first, front"};
  for (size_t i = 0; i < 18; ++i) {
    const nlohmann::json& run = j["runs"][i];
    EXPECT_EQ(run["flow"], flows[i % 9]) << run;
    EXPECT_EQ(run["prompt_tokens"], i < 9 ? 200 : 300) << run;
    EXPECT_GT(run["time_to_first_token_seconds_median"].get<double>(), 0) << run;
  }
  // Recompute front (generate, the engine): the prefix prefilled in front and the
  // chunks fetched from the back cover what full first fetched.
  for (size_t i : {7, 8, 16, 17}) {
    const size_t full_first = i < 9 ? 1 : 10;
    EXPECT_EQ(j["runs"][i]["front_recomputed"].get<int>() + 64 * j["runs"][i]["full_chunks_hit"].get<int>(),
              64 * j["runs"][full_first]["full_chunks_hit"].get<int>())
        << j["runs"][i];
  }
  EXPECT_EQ(j["runs"][0]["full_chunks_hit"], 0);          // recompute: the store was cleared
  for (size_t i : {1, 4, 6}) EXPECT_GT(j["runs"][i]["full_chunks_hit"].get<int>(), 1) << j["runs"][i];
  for (size_t i : {2, 3, 5})
    EXPECT_GT(j["runs"][i]["compressed_chunks_hit"].get<int>(), 1) << j["runs"][i];
  EXPECT_EQ(j["runs"][4]["compressed_chunks_hit"], 0) << "the engine's full flow";
  EXPECT_EQ(j["predraft"], 256);
  EXPECT_EQ(j["fold_every"], 64);
  // Full decode: no drafts, one verify pass per token after the first.
  for (size_t i : {6, 15}) {
    EXPECT_EQ(j["runs"][i]["drafted"], 0) << j["runs"][i];
    EXPECT_EQ(j["runs"][i]["rounds"], 5) << j["runs"][i];
  }
  EXPECT_GT(j["runs"][2]["drafted"].get<int>(), 0) << j["runs"][2];
}

TEST(bench_remote, behind_and_extend_rows_time_requests_among_other_cached_prompts) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const auto r = vc::test::run_vericache(
      "bench remote --remote " + server.url() +
          " --lengths 200 --remote-chunk 64 --max-tokens 6 --behind 700 --fetch-segment 2 --extend 150 --json",
      false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 16u);
  // --extend: 350 tokens over the 200-token prompt's cached chunks (3 of 64).
  EXPECT_EQ(j["runs"][13]["flow"], "on cached 200, full first");
  EXPECT_EQ(j["runs"][14]["flow"], "on cached 200, compressed");
  EXPECT_EQ(j["runs"][15]["flow"], "on cached 200, default");
  for (size_t i : {13, 14, 15}) {
    EXPECT_EQ(j["runs"][i]["prompt_tokens"], 350) << j["runs"][i];
    EXPECT_EQ(j["runs"][i]["full_chunks_hit"], 3) << j["runs"][i];
  }
  EXPECT_EQ(j["runs"][13]["compressed_chunks_hit"], 0) << j["runs"][13];
  EXPECT_FALSE(j["runs"][13]["compressed_first"].get<bool>());
  EXPECT_TRUE(j["runs"][14]["compressed_first"].get<bool>()) << "drafts over the cached chunks: " << j["runs"][14];
  EXPECT_EQ(j["runs"][14]["compressed_chunks_hit"], 3) << j["runs"][14];
  EXPECT_FALSE(j["runs"][15]["compressed_first"].get<bool>()) << "a 158-position suffix, over a chunk: " << j["runs"][15];
  EXPECT_EQ(j["runs"][15]["compressed_chunks_hit"], 0) << "counted, not fetched: " << j["runs"][15];
  EXPECT_EQ(j["runs"][15]["bytes_compressed"], 0) << j["runs"][15];
  EXPECT_EQ(j["runs"][9]["flow"], "behind 700, whole fetch");
  EXPECT_EQ(j["runs"][10]["flow"], "behind 700, segments of 2");
  EXPECT_EQ(j["runs"][11]["flow"], "behind 700, full first");
  EXPECT_EQ(j["runs"][12]["flow"], "behind 700, front");
  EXPECT_FALSE(j["runs"][11]["compressed_first"].get<bool>()) << j["runs"][11];
  EXPECT_EQ(j["runs"][11]["front_recomputed"], 0) << j["runs"][11];
  EXPECT_EQ(j["runs"][12]["front_recomputed"].get<int>() + 64 * j["runs"][12]["full_chunks_hit"].get<int>(),
            64 * j["runs"][11]["full_chunks_hit"].get<int>())
      << "front and back cover what the full flow fetched: " << j["runs"][12];
  for (size_t i : {9, 10}) {
    const nlohmann::json& run = j["runs"][i];
    EXPECT_EQ(run["prompt_tokens"], 200) << run;
    EXPECT_GT(run["compressed_chunks_hit"].get<int>(), 1) << "its own prompt's chunks: " << run;
    EXPECT_GT(run["time_to_first_token_seconds_median"].get<double>(), 0) << run;
  }
}

TEST(bench_remote, a_bad_store_url_is_a_one_line_error) {
  const auto r = vc::test::run_vericache("bench remote --remote localhost:6379", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'localhost:6379' is not a redis://HOST:PORT URL"), std::string::npos) << r.out;
}

}  // namespace

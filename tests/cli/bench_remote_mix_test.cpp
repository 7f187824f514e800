// `vericache bench remote-mix` against a real redis-server: each recompute-front
// policy runs while other requests decode; every cached request equals full
// decoding (the bench fails otherwise), and the JSON says which fronts were
// recomputed and, for the priced policy, why.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

TEST(bench_remote_mix, each_policy_serves_the_cached_requests_while_others_decode_and_says_what_it_did) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const auto r = vc::test::run_vericache(
      "bench remote-mix --remote " + server.url() +
          " --decoding 1 --prompt-tokens 64 --cached 2 --cached-tokens 300 --remote-chunk 64 --max-tokens 4"
          " --local-bandwidth 2e8 --repeats 1 --json",
      false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["policy"], "fetch, then prefill");
  EXPECT_EQ(j["rows"][1]["policy"], "recompute front");
  EXPECT_EQ(j["rows"][2]["policy"], "priced");
  for (const nlohmann::json& row : j["rows"]) {
    ASSERT_EQ(row["runs"].size(), 1u) << row;
    const nlohmann::json& run = row["runs"][0];
    ASSERT_EQ(run["first_token_s"].size(), 2u) << row;
    for (const auto& t : run["first_token_s"]) EXPECT_GT(t.get<double>(), 0) << row;
    EXPECT_GT(run["decode_tokens_per_s_during"].get<double>(), 0) << "the decoding request went on: " << row;
    EXPECT_GT(run["window_s"].get<double>(), 0) << row;
  }
  EXPECT_EQ(j["rows"][0]["runs"][0]["recomputed_front"], nlohmann::json::array({false, false}));
  EXPECT_EQ(j["rows"][1]["runs"][0]["recomputed_front"], nlohmann::json::array({true, true}));
  // Priced: the first cached request comes beside the decoding one with no fetch
  // measured yet, so it fetches; the second decides from the rates (either way,
  // its line says so).
  const nlohmann::json& priced = j["rows"][2]["runs"][0];
  EXPECT_EQ(priced["recomputed_front"][0], false);
  const std::string first = priced["front_price"][0];
  EXPECT_NE(first.find("no fetch measured yet"), std::string::npos) << first;
  const std::string second = priced["front_price"][1];
  EXPECT_NE(second.find("ms to fetch"), std::string::npos) << second;
  EXPECT_NE(second.find(priced["recomputed_front"][1] == true ? "recompute the front" : "fetch, then prefill"),
            std::string::npos)
      << second;
  for (const auto& why : j["rows"][0]["runs"][0]["front_price"]) EXPECT_EQ(why, "") << "not priced";
}

TEST(bench_remote_mix, a_bad_store_url_is_a_one_line_error) {
  const auto r = vc::test::run_vericache("bench remote-mix --remote localhost:6379", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'localhost:6379' is not a redis://HOST:PORT URL"), std::string::npos) << r.out;
}

}  // namespace

// `vericache bench memory` as a user runs it: one row per configuration, each run in
// its own process; compressed modes charge less fast memory than full mode, and
// vericache's output equals full decoding.
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace {

std::string run_cli(const std::string& args, int& code) {
  const auto r = vc::test::run_vericache(args, /*merge_err=*/false);
  code = r.code;
  return r.out;
}

TEST(cli_bench_memory, compressed_modes_hold_less_fast_memory_and_vericache_stays_exact) {
  int code = 0;
  const std::string out =
      run_cli("bench memory --contexts 600 --ratios 4 --gen-tokens 8 --stage-positions 64 --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 4u);  // full, lossy, vericache host, vericache disk
  const size_t full_fast = rows[0]["fast_kv_peak_bytes"].get<size_t>();
  const size_t full_kv = rows[0]["full_kv_bytes"].get<size_t>();
  EXPECT_GE(full_fast, full_kv);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_LT(rows[i]["fast_kv_peak_bytes"].get<size_t>(), full_fast / 2) << rows[i]["config"];
    EXPECT_TRUE(rows[i]["output_equals_full"].get<bool>()) << rows[i]["config"];
    EXPECT_GT(rows[i]["rss_peak_bytes"].get<size_t>(), 0u);
  }
}

TEST(cli_bench_memory, a_device_it_cannot_use_is_one_clear_error_before_any_run) {
  // A bad name fails in the parent; on the CPU rows carry no device columns.
  int code = 0;
  const auto bad = vc::test::run_vericache("bench memory --contexts 64 --ratios 4 --device gpu", true);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--device"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("'gpu'"), std::string::npos) << bad.out;
  const std::string out =
      run_cli("bench memory --contexts 64 --ratios 4 --gen-tokens 2 --stage-positions 64 --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_FALSE(j["rows"][0].contains("device_bytes"));
}

TEST(cli_bench_memory, a_context_past_the_models_is_an_error_naming_the_flags) {
  const auto r = vc::test::run_vericache("bench memory --contexts 40000", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--contexts: 40000 + --gen-tokens 32 exceeds the model's context"),
            std::string::npos)
      << r.out;
}

}  // namespace

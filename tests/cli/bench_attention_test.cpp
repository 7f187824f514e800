// `vericache bench attention` as a user runs it: one row for the full KV and one per
// compressor at each context, each view read the way the drafter reads it (token
// dropping in place, KIVI from its codes, RotateKV from its codes in its rotated
// basis), views holding less than half the bytes (a method that cannot build a view
// at some context is a row naming the error; an unknown name fails the run before it
// starts). --block-tokens sets the full row's
// paged block (the same attention, so the same output up to rounding).
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <string>

#include <nlohmann/json.hpp>

namespace {

TEST(cli_bench_attention, prints_the_full_kv_and_each_view_with_how_the_drafter_reads_it) {
  const auto r = vc::test::run_vericache(
      "bench attention --contexts 300 600 --compressor streaming_llm kivi rotate_kv "
      "--repeats 1 --json",
      false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 8u);  // 2 contexts x (full + 3 methods)
  for (size_t c = 0; c < 2; ++c) {
    const auto& full = rows[c * 4];
    const size_t n = c == 0 ? 300 : 600;
    EXPECT_EQ(full["view"], "full");
    EXPECT_EQ(full["positions"].get<size_t>(), n);
    EXPECT_EQ(full["vs_full"].get<double>(), 1.0);
    const double full_mb = full["mb"].get<double>();
    EXPECT_EQ(rows[c * 4 + 1]["read_as"], "bf16 rows in place");
    EXPECT_LT(rows[c * 4 + 1]["positions"].get<size_t>(), n / 2);  // dropped tokens
    EXPECT_EQ(rows[c * 4 + 2]["read_as"], "from the codes");
    EXPECT_EQ(rows[c * 4 + 2]["positions"].get<size_t>(), n);      // a quantizer keeps all
    EXPECT_EQ(rows[c * 4 + 3]["read_as"], "from the codes, rotated");
    for (size_t m = 1; m <= 3; ++m) {
      const auto& v = rows[c * 4 + m];
      EXPECT_EQ(v["error"], "") << v["view"];
      EXPECT_GT(v["us_per_row"].get<double>(), 0.0) << v["view"];
      EXPECT_LT(v["mb"].get<double>(), full_mb / 2) << v["view"];
    }
  }
  // An unknown method is an error before anything runs (bench_bad_input).
}

TEST(cli_bench_attention, block_tokens_sets_the_full_rows_paged_block_and_is_reported) {
  for (const char* bt : {"16", "64"}) {
    const auto r = vc::test::run_vericache(
        std::string("bench attention --contexts 300 --compressor kivi --repeats 1 --json "
                    "--block-tokens ") + bt,
        false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["block_tokens"].get<size_t>(), std::stoul(bt));
    EXPECT_EQ(j["rows"][0]["view"], "full");
    EXPECT_GT(j["rows"][0]["us_per_row"].get<double>(), 0.0);
  }
  const auto bad = vc::test::run_vericache("bench attention --block-tokens 0", true);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--block-tokens"), std::string::npos) << bad.out;
}

}  // namespace

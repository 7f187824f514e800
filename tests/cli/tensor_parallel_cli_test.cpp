// `vericache generate --tp N`: CPU tensor parallelism from the command line.
#include <gtest/gtest.h>

#include "tests/cli/generate_json.hpp"

namespace vc::test {
namespace {

const std::string kArgs = "--prompt 'def fib(n):' --max-tokens 24 --json --logprobs --seed 7 ";

TEST(generate_tp, vericache_at_degree_2_equals_full_at_degree_2_digit_for_digit) {
  for (const std::string sampling : {"", "--temperature 0.8 "}) {
    const auto full = generate_json(kArgs + sampling + "--tp 2 --mode full");
    const auto vc = generate_json(kArgs + sampling + "--tp 2 --mode vericache --draft 6 --compressor laprox");
    ASSERT_TRUE(full.contains("output_ids"));
    expect_same_tokens(full, vc, "--tp 2 " + sampling);
    EXPECT_EQ(vc["stats"]["tensor_parallel"], 2);
    EXPECT_GT(vc["stats"]["vericache"]["rounds"].get<int>(), 0);
  }
}

TEST(generate_tp, draft_auto_at_degree_2_equals_full_at_degree_2_digit_for_digit) {
  const auto full = generate_json(kArgs + "--tp 2 --mode full");
  const auto vc = generate_json(kArgs + "--tp 2 --mode vericache --draft auto --compressor snapkv");
  ASSERT_TRUE(vc.contains("output_ids")) << vc.dump();
  expect_same_tokens(full, vc, "--tp 2 --draft auto");
  EXPECT_GT(vc["stats"]["vericache"]["rounds"].get<int>(), 0);
}

TEST(generate_tp, a_degree_that_does_not_split_the_heads_is_one_line_and_exit_1) {
  const auto r = run_vericache("generate --prompt x --tp 3", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "error: tensor parallelism: degree 3 does not split the model's 4 attention heads\n");
}

}  // namespace
}  // namespace vc::test

namespace vc::test {
namespace {

TEST(bench_tp, prints_each_degree_side_by_side_and_vericache_equals_full_at_every_degree) {
  const auto r = run_vericache("bench tp --context 64 --gen-tokens 12 --degrees 1 2 4 --repeats 1 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 6u);
  for (const auto& row : j) {
    EXPECT_TRUE(row["exact"].get<bool>()) << row.dump();
    EXPECT_GT(row["decode_tokens_per_second"].get<double>(), 0) << row.dump();
  }
  EXPECT_EQ(j[4]["degree"], 4);
  EXPECT_EQ(j[4]["mode"], "full");
}

}  // namespace
}  // namespace vc::test

// The `vericache` executable as a user runs it.
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Run {
  int code;
  std::string out;
};

// Runs the CLI with `args` (stderr merged into the output when `merge_err`).
Run run_cli(const std::string& args, bool merge_err = false) {
  const auto r = vc::test::run_vericache(args, merge_err);
  return {r.code, r.out};
}

TEST(cli, generate_json_prints_ids_text_logprobs_and_speed) {
  const auto r = run_cli("generate --prompt 'def add(a, b):' --max-tokens 8 --json --logprobs");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["prompt_ids"].empty());
  EXPECT_EQ(j["output_ids"].size(), 8u);
  EXPECT_EQ(j["output_logprobs"].size(), 8u);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_GT(j["stats"]["prefill_tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["stats"]["decode_tokens_per_second"].get<double>(), 0);
}

TEST(cli, two_runs_print_the_same_logprobs_to_nine_digits) {
  const std::string args =
      "generate --prompt 'import os' --max-tokens 6 --json --logprobs --temperature 0.8 --seed 5";
  const auto a = nlohmann::json::parse(run_cli(args).out);
  const auto b = nlohmann::json::parse(run_cli(args + " --threads 1").out);
  EXPECT_EQ(a["output_ids"], b["output_ids"]);
  EXPECT_EQ(a["output_logprobs"].dump(), b["output_logprobs"].dump());
}

TEST(cli, a_missing_model_directory_is_a_clear_error) {
  const auto r = run_cli("generate --model /nonexistent/model --prompt x", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
}

TEST(cli, a_model_path_that_is_empty_or_a_file_says_so) {
  auto r = run_cli("generate --model '' --prompt x", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("model directory: an empty path"), std::string::npos) << r.out;
  r = run_cli(std::string("generate --model ") + VC_CLI_PATH + " --prompt x", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("is a file, not a directory"), std::string::npos) << r.out;
  r = run_cli("generate --model /nonexistent/model --prompt x", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("model directory '/nonexistent/model': does not exist"), std::string::npos) << r.out;
}

TEST(cli, an_unknown_or_missing_command_is_named_with_the_commands_there_are) {
  auto r = run_cli("nosuch", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'vericache' has no command 'nosuch' (its commands: generate, bench"), std::string::npos)
      << r.out;
  r = run_cli("--log-level off bench nosuch", true);
  EXPECT_NE(r.out.find("'vericache bench' has no command 'nosuch'"), std::string::npos) << r.out;
  r = run_cli("cache", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("'vericache cache' needs a command (one of: stats, clear)"), std::string::npos) << r.out;
}

TEST(cli, a_missing_prompt_file_is_a_clear_error) {
  const auto r = run_cli("generate --prompt-file /nonexistent/prompt.txt", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/prompt.txt"), std::string::npos) << r.out;
}

TEST(cli, generate_without_a_prompt_explains_what_is_needed) {
  const auto r = run_cli("generate", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--prompt"), std::string::npos) << r.out;
}

}  // namespace

namespace {

TEST(cli, vericache_mode_prints_the_same_ids_and_logprobs_as_full_mode) {
  const std::string base =
      "generate --prompt '<|begin_of_text|>class Stack:\n    def push(self, item):' "
      "--max-tokens 48 --json --logprobs --ignore-eos";
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 11"}) {
    const auto full = nlohmann::json::parse(run_cli(base + sampling).out);
    for (const std::string vc : {" --mode vericache --compressor snapkv --ratio 4 --draft 30",
                                 " --mode vericache --compressor kivi --ratio 8 --draft auto",
                                 " --mode vericache --compressor h2o --draft 4 --full-tier disk"}) {
      const auto r = run_cli(base + sampling + vc);
      ASSERT_EQ(r.code, 0) << vc << r.out;
      const auto j = nlohmann::json::parse(r.out);
      EXPECT_EQ(full["output_ids"], j["output_ids"]) << vc;
      EXPECT_EQ(full["output_logprobs"].dump(), j["output_logprobs"].dump()) << vc;
      const auto& s = j["stats"]["vericache"];
      EXPECT_GT(s["rounds"].get<int>(), 0);
      EXPECT_TRUE(s.contains("accepted_per_round_histogram"));
      EXPECT_TRUE(s.contains("acceptance_rate"));
      EXPECT_GT(s["bytes_read"]["full_tier"].get<double>(), 0);
    }
  }
}

TEST(cli, block_tokens_sets_the_kv_block_and_vericache_equals_full_at_each_size) {
  const std::string base =
      "generate --prompt '<|begin_of_text|>def merge(a, b):\n    out = []' --max-tokens 40 "
      "--json --logprobs --ignore-eos --temperature 0.7 --seed 2";
  for (const std::string bt : {" --block-tokens 1", " --block-tokens 16", " --block-tokens 100"}) {
    const auto full = nlohmann::json::parse(run_cli(base + bt).out);
    const auto r = run_cli(base + bt + " --mode vericache --compressor snapkv --ratio 4 --draft 8");
    ASSERT_EQ(r.code, 0) << bt << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(full["output_ids"], j["output_ids"]) << bt;
    EXPECT_EQ(full["output_logprobs"].dump(), j["output_logprobs"].dump()) << bt;
  }
  const auto bad = run_cli("generate --prompt x --block-tokens 0", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--block-tokens"), std::string::npos) << bad.out;
}

TEST(cli, lossy_mode_reports_the_compression_it_applied) {
  const auto r = run_cli(
      "generate --prompt 'def add(a, b):\n    return a + b\n' --max-tokens 8 --json "
      "--mode lossy --compressor streaming_llm --ratio 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stats"]["mode"], "lossy");
  EXPECT_GT(j["stats"]["compression"]["compressed_bytes"].get<double>(), 0);
}

TEST(cli, an_unknown_compressor_is_a_clear_error_listing_the_methods) {
  const auto r = run_cli("generate --prompt x --mode lossy --compressor nope", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("nope"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("snapkv"), std::string::npos) << r.out;
}

TEST(cli, compressor_parameters_can_be_set_and_a_bad_one_is_named) {
  const std::string base =
      "generate --prompt 'import os\nimport sys\n' --max-tokens 4 --json --mode lossy "
      "--compressor streaming_llm --ratio 2";
  const auto ok = run_cli(base + " --compressor-param sinks=1");
  ASSERT_EQ(ok.code, 0) << ok.out;
  const auto bad = run_cli(base + " --compressor-param nope=3", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("nope"), std::string::npos) << bad.out;
  const auto malformed = run_cli(base + " --compressor-param sinks", true);
  EXPECT_EQ(malformed.code, 1);
  EXPECT_NE(malformed.out.find("NAME=VALUE"), std::string::npos) << malformed.out;
}

TEST(cli, a_bad_draft_length_is_a_clear_error) {
  const auto r = run_cli("generate --prompt x --mode vericache --draft many", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--draft"), std::string::npos) << r.out;
}

TEST(cli, compressors_json_lists_every_method_with_its_parameters) {
  const auto r = run_cli("compressors --json");
  ASSERT_EQ(r.code, 0);
  const auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& c : j) names.push_back(c["name"]);
  for (const char* m : {"streaming_llm", "snapkv", "h2o", "expected_attention", "kvzip", "laprox",
                        "kivi", "kvquant", "rotate_kv"})
    EXPECT_NE(std::find(names.begin(), names.end(), m), names.end()) << m;
}

}  // namespace

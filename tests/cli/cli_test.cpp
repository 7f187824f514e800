// The `vericache` executable as a user runs it.
#include <gtest/gtest.h>

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
  const std::string cmd = std::string(VC_CLI_PATH) + " " + args + (merge_err ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
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

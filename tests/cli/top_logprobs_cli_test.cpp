// `--top-logprobs N` as a user runs it: `generate --json` prints output_top_logprobs
// (one list per output token of N {"id", "logprob"} entries, most likely first),
// vericache prints the very text of --mode full, a `batch` line's `top_logprobs`
// prints what `generate` prints, and an out-of-range N is a one-line error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGenerate =
    "generate --prompt '<|begin_of_text|>def add(a, b):' --max-tokens 24 --json --ignore-eos";

json run_json(const std::string& args) {
  const auto r = vc::test::run_vericache(args, false);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
  return r.code == 0 ? json::parse(r.out) : json();
}

TEST(cli_top_logprobs, generate_prints_n_sorted_entries_per_output_token) {
  const json j = run_json(kGenerate + " --top-logprobs 5");
  ASSERT_EQ(j["output_ids"].size(), 24u);
  ASSERT_EQ(j["output_logprobs"].size(), 24u) << "--top-logprobs implies --logprobs";
  ASSERT_EQ(j["output_top_logprobs"].size(), 24u);
  for (size_t i = 0; i < 24; ++i) {
    const json& top = j["output_top_logprobs"][i];
    ASSERT_EQ(top.size(), 5u);
    for (size_t k = 1; k < top.size(); ++k)
      EXPECT_GE(top[k - 1]["logprob"].get<double>(), top[k]["logprob"].get<double>());
    // Greedy: the chosen token is the most likely one, printed with the same digits.
    EXPECT_EQ(top[0]["id"], j["output_ids"][i]) << i;
    EXPECT_EQ(top[0]["logprob"].dump(), j["output_logprobs"][i].dump()) << i;
  }
  const json plain = run_json(kGenerate + " --logprobs");
  EXPECT_FALSE(plain.contains("output_top_logprobs"));
  EXPECT_EQ(plain["output_logprobs"].dump(), j["output_logprobs"].dump());
}

TEST(cli_top_logprobs, vericache_prints_the_lists_of_full_mode) {
  for (const std::string sampling : {"", " --temperature 0.8 --top-k 40 --seed 9"}) {
    const json full = run_json(kGenerate + sampling + " --top-logprobs 20");
    const json vc = run_json(kGenerate + sampling +
                             " --top-logprobs 20 --mode vericache --compressor snapkv --draft 6");
    EXPECT_EQ(full["output_ids"], vc["output_ids"]) << sampling;
    EXPECT_EQ(full["output_top_logprobs"].dump(), vc["output_top_logprobs"].dump()) << sampling;
    EXPECT_GT(vc["stats"]["vericache"]["rounds"].get<int>(), 0);
  }
}

TEST(cli_top_logprobs, a_count_over_20_is_a_one_line_error_naming_the_option) {
  const auto r = vc::test::run_vericache(kGenerate + " --top-logprobs 21", true);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--top-logprobs"), std::string::npos) << r.out;
}

TEST(cli_top_logprobs, a_batch_line_prints_what_generate_prints) {
  const fs::path dir = fs::temp_directory_path() / ("vc-top-logprobs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const json line = {{"prompt", "<|begin_of_text|>def add(a, b):"}, {"max_tokens", 24},
                     {"mode", "vericache"}, {"draft", 6}, {"ignore_eos", true},
                     {"temperature", 0.8}, {"seed", 9}, {"top_logprobs", 3}};
  std::ofstream(dir / "in.jsonl") << line.dump() << "\n"
                                  << R"({"prompt": "x", "top_logprobs": 21})" << "\n";
  const auto r = vc::test::run_vericache("batch --input " + (dir / "in.jsonl").string() +
                                             " --output " + (dir / "out.jsonl").string(),
                                         true);
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(dir / "out.jsonl");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  fs::remove_all(dir);
  const json got = json::parse(first);
  const json g = run_json(kGenerate + " --temperature 0.8 --seed 9 --top-logprobs 3");
  EXPECT_EQ(got["output_ids"], g["output_ids"]);
  EXPECT_EQ(got["output_logprobs"].dump(), g["output_logprobs"].dump());
  EXPECT_EQ(got["output_top_logprobs"].dump(), g["output_top_logprobs"].dump());
  const json bad = json::parse(second);
  EXPECT_NE(bad["error"].get<std::string>().find("field 'top_logprobs'"), std::string::npos)
      << bad.dump();
}

}  // namespace

// `vericache model random|scale` and `vericache bench rows` as a user runs them:
// a generated model runs through `generate`, and bad input is one error line.
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Run {
  int code;
  std::string out;
};

Run run_cli(const std::string& args, bool merge_err = false) {
  const auto r = vc::test::run_vericache(args, merge_err);
  return {r.code, r.out};
}

class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "vc_modelcmd_XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] std::string operator/(const std::string& n) const { return (path_ / n).string(); }

 private:
  fs::path path_;
};

// Exactly one line, starting "error: " and containing `part`.
void expect_one_error_line(const Run& r, const std::string& part) {
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(r.out.starts_with("error: ")) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find(part), std::string::npos) << r.out;
}

TEST(cli_model, random_and_scale_write_models_that_generate_runs) {
  ScratchDir dir;
  auto r = run_cli("model random --shape test-tiny --seed 5 --out " + dir / "random");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("model random: wrote"), std::string::npos) << r.out;
  r = run_cli("generate --model " + dir / "random" + " --prompt 'def f():' --max-tokens 4 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["output_ids"].size(), 4u);

  r = run_cli("model scale --shape test-tiny --out " + dir / "scaled");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string args = " --prompt '<|begin_of_text|>def fibonacci(n):' --max-tokens 24 --json --ignore-eos";
  const auto src = nlohmann::json::parse(run_cli("generate" + args).out);
  const auto big = nlohmann::json::parse(run_cli("generate --model " + dir / "scaled" + args).out);
  EXPECT_EQ(src["output_ids"], big["output_ids"]);
  std::ifstream card(dir / "scaled/MODEL_CARD.md");
  const std::string text{std::istreambuf_iterator<char>(card), {}};
  EXPECT_NE(text.find("What is not"), std::string::npos);
}

TEST(cli_model, an_unknown_shape_is_one_error_line_listing_the_known_ones) {
  ScratchDir dir;
  expect_one_error_line(run_cli("model random --shape llama-9z --out " + dir / "m", true),
                        "unknown shape 'llama-9z'");
  expect_one_error_line(run_cli("model scale --shape llama-9z --out " + dir / "m", true),
                        "llama-3.2-1b");
}

TEST(cli_model, a_shape_smaller_than_the_source_is_one_error_line) {
  ScratchDir dir;
  std::ofstream(dir / "small.json") << R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 128, "intermediate_size": 1024, "num_hidden_layers": 8,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
    "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5})";
  expect_one_error_line(run_cli("model scale --shape " + dir / "small.json" + " --out " + dir / "m", true),
                        "hidden_size 128 is smaller than the source model's 256");
  EXPECT_FALSE(fs::exists(dir / "m"));
}

TEST(cli_model, a_vocabulary_smaller_than_the_tokenizers_is_one_error_line_and_writes_nothing) {
  ScratchDir dir;
  std::ofstream(dir / "v100.json") << R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "vocab_size": 100, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5})";
  expect_one_error_line(run_cli("model random --shape " + dir / "v100.json" + " --out " + dir / "m", true),
                        "vocab_size 100 is smaller than the tokenizer's 2048 ids");
  EXPECT_FALSE(fs::exists(dir / "m"));
}

TEST(cli_model, an_unwritable_or_foreign_out_directory_is_one_error_line) {
  ScratchDir dir;
  std::ofstream(dir / "file") << "x";
  expect_one_error_line(run_cli("model random --shape test-tiny --out " + dir / "file/sub", true),
                        "--out '" + dir / "file/sub" + "'");
  expect_one_error_line(run_cli("model random --shape test-tiny --out " + dir / "file", true),
                        "not a directory");
  // A non-empty directory that no `vericache model` wrote is left alone.
  expect_one_error_line(run_cli("model scale --shape test-tiny --out " + dir / "", true),
                        "not empty");
  EXPECT_TRUE(fs::exists(dir / "file"));
}

TEST(cli_bench_rows, prints_one_figure_per_row_count_with_the_ratio_to_one_row) {
  auto r = run_cli("bench rows --context 64 --rows 1 4 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["ratio_to_smallest"].get<double>(), 1.0);
  EXPECT_GT(j["rows"][1]["ms_per_pass"].get<double>(), 0.0);
  r = run_cli("bench rows --context 40000 --rows 1", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("exceeds the model's context"), std::string::npos) << r.out;
}

}  // namespace

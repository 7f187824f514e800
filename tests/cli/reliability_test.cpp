// Every bad input a clear error, nothing lost: the `vericache` executable run with
// the inputs a careless or hostile user tries (issue #9). Each bad input ends in
// exactly one "error: ..." line naming the option, file or field and the value, and
// exit status 1; nothing crashes, hangs or reads without bound.
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out;  // stdout and stderr
  double seconds;
};

CliRun run_cli(const std::string& args) {
  const auto r = vc::test::run_vericache(args, /*merge_err=*/true);
  return {r.code, r.out, r.seconds};
}

size_t lines_of(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Exit 1, one line, "error: " first, and every word in `words` present.
::testing::AssertionResult one_line_error(const CliRun& r, const std::vector<std::string>& words) {
  if (r.code != 1) return ::testing::AssertionFailure() << "exit " << r.code << ": " << r.out;
  if (lines_of(r.out) != 1 || !r.out.starts_with("error: "))
    return ::testing::AssertionFailure() << "not one error line: " << r.out;
  for (const auto& w : words)
    if (r.out.find(w) == std::string::npos)
      return ::testing::AssertionFailure() << "no '" << w << "' in: " << r.out;
  return ::testing::AssertionSuccess();
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("vc-reliability-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  [[nodiscard]] std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

// A copy of the bundled model with config.json edited by `edit`.
template <typename Edit>
std::string model_with_config(const TempDir& d, Edit edit) {
  const fs::path m = d.path / "model";
  fs::create_directories(m);
  for (const char* f : {"model.safetensors", "tokenizer.json"})
    fs::copy_file(fs::path(VC_MODEL_DIR) / f, m / f);
  std::ifstream in(fs::path(VC_MODEL_DIR) / "config.json");
  json c = json::parse(in);
  edit(c);
  std::ofstream(m / "config.json") << c.dump();
  return m.string();
}

const std::string kPrompt = " --prompt 'def f():' ";

// ---- option values -----------------------------------------------------------

TEST(cli, rejects_a_negative_thread_count_with_one_line_and_exit_1) {
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--threads -2"), {"--threads", "-2"}));
  EXPECT_TRUE(one_line_error(run_cli("batch --input x --output y --threads -1"), {"--threads"}));
}

TEST(cli, an_unknown_option_or_a_malformed_value_prints_one_line_and_exits_1) {
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--bogus"), {"--bogus"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--max-tokens abc"),
                             {"--max-tokens", "abc"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--mode fast"), {"--mode", "fast"}));
}

TEST(cli, range_errors_state_the_bound_briefly) {
  const CliRun r = run_cli("generate" + kPrompt + "--temperature -1");
  EXPECT_TRUE(one_line_error(r, {"--temperature", ">= 0", "-1"}));
  EXPECT_LT(r.out.size(), 120u) << r.out;  // no 309-digit bound
}

TEST(cli, rejects_a_negative_seed_and_a_seed_past_2_to_the_64_minus_1) {
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--seed -1"), {"--seed", "'-1'"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--seed 18446744073709551616"),
                             {"--seed", "18446744073709551616"}));
  const CliRun ok = run_cli("generate" + kPrompt +
                         "--seed 18446744073709551615 --temperature 0.7 --max-tokens 2 --json");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

TEST(cli, rejects_negative_fold_every_and_max_tokens_past_the_model_context) {
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--fold-every -3"), {"--fold-every", "-3"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--max-tokens 0"), {"--max-tokens"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--max-tokens 40000"),
                             {"--max-tokens", "40000", "context"}));
}

TEST(cli, rejects_a_zero_or_nan_ratio_and_a_bad_draft) {
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--ratio nan"), {"--ratio", "nan"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--ratio 0"), {"--ratio"}));
  EXPECT_TRUE(one_line_error(run_cli("generate" + kPrompt + "--draft abc"), {"--draft", "abc"}));
}

TEST(cli, bench_throughput_rejects_zero_contexts_ratios_and_bandwidths_instead_of_crashing) {
  for (const std::string bad : {"--contexts 0", "--ratio 0", "--ratio nan", "--hbm-gbps 0",
                                "--link-gbps -1", "--gen-tokens -5", "--fold-every -1"}) {
    const CliRun r = run_cli("bench throughput " + bad);
    EXPECT_TRUE(one_line_error(r, {bad.substr(0, bad.find(' '))})) << bad;
  }
}

TEST(cli, benches_reject_contexts_past_the_model_limit_before_running) {
  const CliRun d = run_cli("bench decode --contexts 40000");
  EXPECT_TRUE(one_line_error(d, {"--contexts", "40000", "32768"}));
  const CliRun t = run_cli("bench throughput --contexts 40000");
  EXPECT_TRUE(one_line_error(t, {"--contexts", "40000", "32768"}));
  EXPECT_LT(t.seconds, 30.0);
}

TEST(cli, bench_acceptance_names_a_bad_draft_and_a_bad_prompts_file) {
  EXPECT_TRUE(one_line_error(run_cli("bench acceptance --drafts abc"), {"--drafts", "abc"}));
  TempDir d("prompts");
  const std::string f = d.file("p.json", R"({"cases": [{"name": 3}]})");
  EXPECT_TRUE(one_line_error(run_cli("bench acceptance --prompts " + f), {"--prompts", f, "cases[0]"}));
  const std::string g = d.file("p.jsonl", "{\"prompt\": 1}\n");
  EXPECT_TRUE(one_line_error(run_cli("bench divergence --prompts " + g), {g, "line 1"}));
}

// ---- files -------------------------------------------------------------------

TEST(cli, a_prompt_file_that_is_a_directory_is_named_as_such) {
  TempDir d("pdir");
  EXPECT_TRUE(one_line_error(run_cli("generate --prompt-file " + d.path.string()),
                             {"--prompt-file", d.path.string(), "directory"}));
}

TEST(cli, an_endless_prompt_file_or_config_file_stops_at_the_limit) {
  const CliRun p = run_cli("generate --prompt-file /dev/zero");
  EXPECT_TRUE(one_line_error(p, {"--prompt-file", "/dev/zero", "limit"}));
  const CliRun c = run_cli("--config /dev/zero generate --prompt x");
  EXPECT_TRUE(one_line_error(c, {"/dev/zero", "limit"}));
  EXPECT_LT(p.seconds + c.seconds, 20.0);
}

TEST(cli, config_file_typos_are_errors_naming_the_file_and_line) {
  TempDir d("conf");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"[generate]\nmax-tokenz = 4\n", {":2:", "unknown key 'max-tokenz'"}},
      {"# c\n[generat]\n", {":2:", "unknown section [generat]"}},
      {"max-tokens = 4\n[generate]\n", {":1:", "before any [section]"}},
      {"[generate\nmax-tokens = 4\n", {":1:", "unterminated section header"}},
      {"[generate]\nthis is not a setting\n", {":2:", "expected 'key = value'"}},
      {"[generate]\nmax-tokens = 2\nthreads = 1\nmax-tokens = 6\n",
       {":4:", "'max-tokens' is set twice in [generate] (first at line 2)"}},
      {std::string("\x7f" "ELF\x02\x01\x01\0\0\0", 10), {"binary data"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string name = "case";
    name += std::to_string(i);
    name += ".conf";
    const std::string f = d.file(name, cases[i].first);
    auto words = cases[i].second;
    words.push_back(f);
    EXPECT_TRUE(one_line_error(run_cli("--config " + f + " generate --prompt x"), words)) << i;
  }
  EXPECT_TRUE(one_line_error(run_cli("--config " + d.path.string() + " generate --prompt x"),
                             {d.path.string(), "directory"}));
}

TEST(cli, a_bad_value_from_a_config_file_names_the_file_and_line) {
  TempDir d("confval");
  const std::string f = d.file("v.conf", "[generate]\n# threads\nthreads = -4\n");
  EXPECT_TRUE(one_line_error(run_cli("--config " + f + " generate --prompt x"),
                             {f + ":3:", "--threads", "-4"}));
  const std::string g = d.file("r.conf", "[generate]\nratio = 0.5\n");
  EXPECT_TRUE(one_line_error(run_cli("--config " + g + " generate --prompt x"), {g + ":2:", "--ratio"}));
  // The command line wins over the file, so the file's bad value is not used.
  EXPECT_EQ(run_cli("--config " + f + " generate --prompt x --threads 1 --max-tokens 1").code, 0);
}

TEST(cli, a_bad_value_in_the_section_of_a_command_that_does_not_run_is_not_used_and_a_bom_is_skipped) {
  TempDir d("confother");
  // [generate]'s bad value, running `compressors`: not applied, so not an error
  // (it was, with no file or line: CLI11 checked it all the same).
  const std::string f = d.file("o.conf", "\xEF\xBB\xBF[generate]\nmax-tokens = -5\n");
  const CliRun r = run_cli("--config " + f + " compressors");
  EXPECT_EQ(r.code, 0) << r.out;
  // Run by `generate`, the same line is the error it names.
  EXPECT_TRUE(one_line_error(run_cli("--config " + f + " generate --prompt x"), {f + ":2:", "--max-tokens", "-5"}));
  // A typo there is still found whatever runs.
  const std::string g = d.file("t.conf", "[generate]\nmax-tokenz = 4\n");
  EXPECT_TRUE(one_line_error(run_cli("--config " + g + " compressors"), {g + ":2:", "unknown key 'max-tokenz'"}));
}

TEST(cli, a_config_list_value_keeps_a_comma_inside_quotes) {
  TempDir d("conflist");
  // One value "a,b" for a list option: its comma is not a separator. bench
  // divergence --compressor takes a list; "snapkv,kivi" is no method, and the error
  // names it whole (it said "unterminated string" before).
  const std::string f = d.file("l.conf", "[bench.divergence]\ncompressor = [\"snapkv,kivi\", 'h2o']\n");
  const CliRun r = run_cli("--config " + f + " bench divergence --steps 1 --ratios 2");
  EXPECT_TRUE(one_line_error(r, {"unknown compressor 'snapkv,kivi'"})) << r.out;
}

TEST(cli, the_shipped_defaults_config_is_accepted) {
  const CliRun r = run_cli("--config " + std::string(VC_MODEL_DIR) +
                        "/../../configs/defaults.conf generate --prompt 'def' --max-tokens 2 --json");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(cli, log_level_off_does_not_hide_the_error_line) {
  EXPECT_TRUE(one_line_error(run_cli("--log-level off generate --model /nonexistent/m --prompt x"),
                             {"/nonexistent/m"}));
}

// ---- model files -------------------------------------------------------------

TEST(cli, a_model_whose_hidden_act_is_not_silu_is_rejected_naming_field_and_value) {
  TempDir d("act");
  const std::string m = model_with_config(d, [](json& c) { c["hidden_act"] = "gelu"; });
  EXPECT_TRUE(one_line_error(run_cli("generate --model " + m + kPrompt),
                             {"config.json", "'hidden_act'", "gelu"}));
}

TEST(cli, an_eos_id_outside_the_vocabulary_is_rejected) {
  TempDir d("eos");
  const std::string m = model_with_config(d, [](json& c) { c["eos_token_id"] = 99999; });
  EXPECT_TRUE(one_line_error(run_cli("generate --model " + m + kPrompt), {"'eos_token_id'", "99999"}));
}

TEST(cli, a_request_past_a_mistral_sliding_window_is_refused_naming_the_window) {
  // The window is not applied, so it bounds the context: within it the output is the
  // reference's, past it the command stops before any work.
  TempDir d("window");
  const std::string m = model_with_config(d, [](json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 16;
  });
  EXPECT_TRUE(one_line_error(run_cli("generate --model " + m + kPrompt + "--max-tokens 30"),
                             {"--max-tokens", "context of 16"}));
  EXPECT_TRUE(one_line_error(
      run_cli("generate --model " + m + " --prompt 'def fibonacci(n): return a long prompt here'"),
      {"--prompt", "sliding_window"}));
  const auto ok = run_cli("generate --model " + m + kPrompt + "--max-tokens 8");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

TEST(cli, a_config_json_nested_tens_of_thousands_deep_is_an_error_not_a_crash) {
  TempDir d("deep");
  const std::string m = model_with_config(d, [](json&) {});
  std::ofstream(fs::path(m) / "config.json") << std::string(50000, '[') << std::string(50000, ']');
  EXPECT_TRUE(one_line_error(run_cli("generate --model " + m + kPrompt), {"config.json", "nested"}));
}

TEST(cli, a_config_json_or_tokenizer_json_that_is_a_directory_is_named_as_such) {
  TempDir d("mdir");
  const std::string m = model_with_config(d, [](json&) {});
  fs::remove(fs::path(m) / "tokenizer.json");
  fs::create_directories(fs::path(m) / "tokenizer.json");
  EXPECT_TRUE(one_line_error(run_cli("generate --model " + m + kPrompt), {"tokenizer.json", "directory"}));
}

// ---- batch -------------------------------------------------------------------

std::vector<json> read_results(const fs::path& p) {
  std::ifstream in(p);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(cli_batch, an_input_that_is_a_directory_is_an_error) {
  TempDir d("bdir");
  EXPECT_TRUE(one_line_error(
      run_cli("batch --input " + d.path.string() + " --output " + (d.path / "o").string()),
      {"--input", "directory"}));
}

TEST(cli_batch, a_line_nested_tens_of_thousands_deep_gets_an_error_and_the_rest_run) {
  TempDir d("bdeep");
  const std::string in = d.file(
      "in.jsonl", "{\"prompt\": \"def f():\", \"max_tokens\": 3}\n{\"prompt\": " +
                      std::string(50000, '[') + std::string(50000, ']') +
                      "}\n{\"prompt\": \"x\", \"max_tokens\": 2}\n");
  const CliRun r = run_cli("batch --input " + in + " --output " + (d.path / "o.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "o.jsonl");
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(res[0]["output_ids"].size(), 3u);
  EXPECT_NE(res[1]["error"].get<std::string>().find("line 2: JSON nested deeper"), std::string::npos)
      << res[1].dump();
  EXPECT_EQ(res[2]["output_ids"].size(), 2u);
}

TEST(cli_batch, max_queue_makes_the_batch_wait_instead_of_dropping_lines) {
  TempDir d("bqueue");
  std::string lines;
  for (int i = 0; i < 8; ++i) lines += "{\"prompt\": \"def g():\", \"max_tokens\": 4}\n";
  const std::string in = d.file("in.jsonl", lines);
  const CliRun r = run_cli("batch --input " + in + " --output " + (d.path / "o.jsonl").string() +
                        " --concurrency 1 --max-queue 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "o.jsonl");
  ASSERT_EQ(res.size(), 8u);
  for (const auto& j : res) EXPECT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NE(r.out.find("8 requests, 8 ok, 0 failed"), std::string::npos) << r.out;
}

TEST(cli_batch, max_queue_makes_the_batch_wait_when_the_memory_budget_runs_fewer_than_its_concurrency) {
  // 6M of fast memory holds fewer than 4 of these requests: the rest of the window
  // waits in the engine's queue, none is answered "overloaded".
  TempDir d("bqueuemem");
  std::string lines;
  for (int i = 0; i < 8; ++i)
    lines += "{\"prompt\": \"import sys\\n\", \"max_tokens\": 200, \"ignore_eos\": true, \"mode\": \"full\"}\n";
  const std::string in = d.file("in.jsonl", lines);
  const CliRun r = run_cli("batch --input " + in + " --output " + (d.path / "o.jsonl").string() +
                           " --concurrency 4 --max-queue 1 --fast-memory 6M");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "o.jsonl");
  ASSERT_EQ(res.size(), 8u);
  for (const auto& j : res) EXPECT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NE(r.out.find("8 requests, 8 ok, 0 failed"), std::string::npos) << r.out;
}

TEST(cli_batch, an_unwritable_trace_path_is_reported_before_any_work) {
  TempDir d("btrace");
  const std::string in = d.file("in.jsonl", "{\"prompt\": \"x\", \"max_tokens\": 2}\n");
  const CliRun r = run_cli("batch --input " + in + " --output " + (d.path / "o.jsonl").string() +
                        " --trace /nonexistent/dir/t.json");
  EXPECT_TRUE(one_line_error(r, {"--trace", "/nonexistent/dir/t.json"}));
  EXPECT_TRUE(read_results(d.path / "o.jsonl").empty()) << "no request should have run";
}

TEST(cli_batch, lines_have_generate_defaults_and_ranges) {
  TempDir d("bdefaults");
  const std::string in = d.file("in.jsonl",
                                "{\"prompt\": \"def add(a, b):\", \"max_tokens\": 6}\n"
                                "{\"prompt\": \"x\", \"mode\": \"lossy\", \"ratio\": 0.5}\n"
                                "{\"prompt\": \"x\", \"seed\": -1}\n"
                                "{\"prompt\": \"x\", \"max_tokens\": 40000}\n");
  const CliRun r = run_cli("batch --input " + in + " --output " + (d.path / "o.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "o.jsonl");
  ASSERT_EQ(res.size(), 4u);
  const CliRun g = run_cli("generate --prompt 'def add(a, b):' --max-tokens 6 --json 2>/dev/null");
  const json gj = json::parse(g.out);
  EXPECT_EQ(res[0]["stats"]["mode"], gj["stats"]["mode"]);  // "full", as generate
  EXPECT_EQ(res[0]["output_ids"], gj["output_ids"]);
  const std::vector<std::string> fields = {"ratio", "seed", "max_tokens"};
  for (size_t i = 1; i < 4; ++i)
    EXPECT_NE(res[i]["error"].get<std::string>().find("line " + std::to_string(i + 1) + ": field '" +
                                                      fields[i - 1] + "'"),
              std::string::npos)
        << res[i].dump();
}

}  // namespace

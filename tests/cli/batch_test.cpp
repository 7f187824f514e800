// `vericache batch` as a user runs it: results match `generate --json --logprobs`
// line for line, bad lines get per-line errors, output order is input order, and
// --trace writes a Chrome trace.
#include <gtest/gtest.h>

#include "tests/cli/cli_support.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct BatchRun {
  int code;
  std::string out;  // stdout and stderr
};

BatchRun run_batch_cli(const std::string& args) {
  const auto r = vc::test::run_vericache(args, /*merge_err=*/true);
  return {r.code, r.out};
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A fresh temp dir per test, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("vc-batch-test-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p);
  for (const auto& l : lines) out << l << "\n";
}

std::vector<json> read_results(const fs::path& p) {
  std::ifstream in(p);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

std::string batch_args(const TempDir& d, const std::string& extra = "") {
  return "batch --input " + quoted((d.path / "in.jsonl").string()) + " --output " +
         quoted((d.path / "out.jsonl").string()) + extra;
}

// The `generate` command line equivalent to one batch input line.
std::string generate_args(const json& line) {
  std::string a = "generate --json --logprobs";
  for (const auto& [k, v] : line.items()) {
    if (k == "prompt") a += " --prompt " + quoted(v.get<std::string>());
    else if (k == "max_tokens") a += " --max-tokens " + v.dump();
    else if (k == "mode" || k == "compressor") a += " --" + k + " " + v.get<std::string>();
    else if (k == "draft") a += " --draft " + (v.is_string() ? v.get<std::string>() : v.dump());
    else if (k == "ratio" || k == "temperature" || k == "seed") a += " --" + k + " " + v.dump();
    else if (k == "top_k") a += " --top-k " + v.dump();
    else if (k == "top_p") a += " --top-p " + v.dump();
    else if (k == "stop") a += " --stop " + quoted(v.get<std::string>());
    else if (k == "ignore_eos" && v.get<bool>()) a += " --ignore-eos";
  }
  return a;
}

TEST(cli_batch, mixed_lines_match_generate_exactly) {
  TempDir d("mixed");
  const std::string p1 = "<|begin_of_text|>def add(a, b):";
  const std::string p2 = "<|begin_of_text|>class Stack:\n    def push(self, item):";
  const std::vector<json> lines = {
      {{"prompt", p1}, {"max_tokens", 24}, {"mode", "full"}, {"logprobs", true},
       {"ignore_eos", true}},
      {{"prompt", p2}, {"max_tokens", 32}, {"mode", "vericache"}, {"compressor", "snapkv"},
       {"ratio", 4}, {"draft", 8}, {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", p2}, {"max_tokens", 32}, {"mode", "vericache"}, {"compressor", "kivi"},
       {"ratio", 8}, {"draft", "auto"}, {"temperature", 0.7}, {"top_k", 40}, {"seed", 11},
       {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", p1}, {"max_tokens", 12}, {"mode", "lossy"}, {"compressor", "streaming_llm"},
       {"ratio", 2}, {"ignore_eos", true}},
      {{"prompt", p1}, {"max_tokens", 20}, {"mode", "full"}, {"temperature", 0.8},
       {"top_p", 0.9}, {"seed", 3}, {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", p1}, {"max_tokens", 28}, {"mode", "vericache"}, {"compressor", "h2o"},
       {"draft", 4}, {"temperature", 0.9}, {"seed", 5}, {"logprobs", true},
       {"ignore_eos", true}},
      {{"id", "custom-7"}, {"prompt", p2}, {"max_tokens", 16}, {"mode", "vericache"},
       {"draft", "16"}, {"ignore_eos", true}},
      {{"prompt", p1}, {"max_tokens", 40}, {"mode", "vericache"}, {"stop", "return"},
       {"logprobs", true}, {"ignore_eos", true}},
  };
  std::vector<std::string> text;
  for (const auto& l : lines) text.push_back(l.dump());
  // One more line, by token ids: the prompt ids `generate` reports for line 2.
  const auto g2 = json::parse(run_batch_cli(generate_args(lines[1]) + " 2>/dev/null").out);
  json by_ids = lines[1];
  by_ids.erase("prompt");
  by_ids["prompt_ids"] = g2["prompt_ids"];
  text.push_back(by_ids.dump());
  write_lines(d.path / "in.jsonl", text);

  const auto r = run_batch_cli(batch_args(d, " --concurrency 4"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), lines.size() + 1);
  for (size_t i = 0; i < res.size(); ++i) {
    const json& in = i < lines.size() ? lines[i] : lines[1];
    const json& got = res[i];
    ASSERT_FALSE(got.contains("error")) << i << ": " << got.dump();
    EXPECT_EQ(got["id"], i == 6 ? json("custom-7") : json(i + 1));
    EXPECT_EQ(got["stats"]["mode"], in["mode"]);
    EXPECT_TRUE(got["text"].is_string());
    EXPECT_EQ(got.contains("output_logprobs"), in.value("logprobs", false)) << i;
    if (in["mode"] == "lossy") {
      EXPECT_EQ(got["output_ids"].size(), 12u);
      EXPECT_GT(got["stats"]["compression"]["compressed_bytes"].get<double>(), 0);
      continue;
    }
    const auto g = json::parse(run_batch_cli(generate_args(in) + " 2>/dev/null").out);
    EXPECT_EQ(got["prompt_ids"], g["prompt_ids"]) << i;
    EXPECT_EQ(got["output_ids"], g["output_ids"]) << i;
    EXPECT_EQ(got["finish_reason"], g["finish_reason"]) << i;
    EXPECT_EQ(got["text"], g["text"]) << i;
    if (got.contains("output_logprobs")) {
      EXPECT_EQ(got["output_logprobs"].dump(), g["output_logprobs"].dump()) << i;
    }
    if (in["mode"] == "vericache") {
      EXPECT_GT(got["stats"]["vericache"]["rounds"].get<int>(), 0);
    }
  }
  EXPECT_NE(r.out.find("9 requests, 9 ok, 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("busy"), std::string::npos) << r.out;
}

TEST(cli_batch, block_tokens_gives_the_output_of_generate_at_the_same_block_size) {
  TempDir d("blocks");
  const json line = {{"prompt", "<|begin_of_text|>def add(a, b):"}, {"max_tokens", 24},
                     {"mode", "vericache"}, {"compressor", "snapkv"}, {"draft", 6},
                     {"temperature", 0.7}, {"seed", 4}, {"logprobs", true}, {"ignore_eos", true}};
  write_lines(d.path / "in.jsonl", {line.dump()});
  const auto r = run_batch_cli(batch_args(d, " --block-tokens 8"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), 1u);
  const auto g = json::parse(run_batch_cli(generate_args(line) + " --block-tokens 8 2>/dev/null").out);
  EXPECT_EQ(res[0]["output_ids"], g["output_ids"]);
  EXPECT_EQ(res[0]["output_logprobs"].dump(), g["output_logprobs"].dump());
  // A remote chunk of part of a block is refused before any work, naming both options.
  const auto bad = run_batch_cli(batch_args(d, " --remote redis://127.0.0.1:1 --remote-chunk 100"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--remote-chunk: expected whole KV blocks (a multiple of --block-tokens, 64)"),
            std::string::npos) << bad.out;
}

TEST(cli_batch, bad_lines_get_their_own_errors_and_the_rest_still_run) {
  TempDir d("bad");
  write_lines(d.path / "in.jsonl",
              {R"({"prompt": "def f():", "max_tokens": 6, "mode": "vericache"})",
               R"({"prompt": "def f():", "max_tokens": 6,)",
               R"({"prompt": "x", "max_tokens": "8"})",
               R"({"prompt": "x", "colour": "blue"})",
               R"({"max_tokens": 4})",
               R"({"prompt": "x", "mode": "fast"})",
               R"({"prompt": "x", "mode": "lossy", "compressor": "nope"})",
               R"([1, 2, 3])",
               R"({"prompt": "import os", "max_tokens": 5, "mode": "full"})"});
  const auto r = run_batch_cli(batch_args(d));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), 9u);
  for (size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i]["id"], i + 1);
  EXPECT_EQ(res[0]["output_ids"].size(), 6u);
  EXPECT_EQ(res[8]["output_ids"].size(), 5u);
  EXPECT_FALSE(res[0].contains("error"));
  EXPECT_FALSE(res[8].contains("error"));
  const std::vector<std::pair<size_t, std::string>> expect = {
      {1, "JSON"}, {2, "max_tokens"}, {3, "colour"}, {4, "prompt"},
      {5, "mode"}, {6, "nope"},       {7, "object"}};
  for (const auto& [i, word] : expect) {
    ASSERT_TRUE(res[i].contains("error")) << i << ": " << res[i].dump();
    const std::string e = res[i]["error"];
    EXPECT_NE(e.find("line " + std::to_string(i + 1)), std::string::npos) << e;
    EXPECT_NE(e.find(word), std::string::npos) << e;
    EXPECT_FALSE(res[i].contains("output_ids"));
  }
  EXPECT_NE(r.out.find("9 requests, 2 ok, 7 failed"), std::string::npos) << r.out;
}

TEST(cli_batch, trace_and_simulated_link_are_reported) {
  TempDir d("trace");
  std::vector<std::string> lines;
  for (int i = 0; i < 4; ++i)
    lines.push_back(json({{"prompt", "<|begin_of_text|>def f" + std::to_string(i) + "(x):"},
                          {"max_tokens", 16}, {"mode", "vericache"}, {"draft", 4}})
                        .dump());
  write_lines(d.path / "in.jsonl", lines);
  const fs::path trace = d.path / "trace.json";
  const auto r = run_batch_cli(
      batch_args(d, " --trace " + quoted(trace.string()) + " --link-gbps 2 --full-tier disk "
                    "--disk-dir " + quoted((d.path / "tier").string())));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(trace);
  ASSERT_TRUE(in.good());
  const json t = json::parse(in);
  ASSERT_TRUE(t.contains("traceEvents"));
  EXPECT_FALSE(t["traceEvents"].empty());
  EXPECT_NE(r.out.find("simulated link 2 GB/s"), std::string::npos) << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), 4u);
  for (const auto& j : res) EXPECT_EQ(j["stats"]["vericache"]["full_tier"], "disk");
}

// --whole-prefill: each prompt's prefill is one slice of the drafter's trace (by
// default a long prompt's is one per chunk of 256 tokens, with --prefill-chunk 64
// one per chunk of 64); the tokens are the same; a chunk of 0 is refused.
TEST(cli_batch, whole_prefill_prefills_each_prompt_in_one_piece_with_the_same_tokens) {
  std::string code = "<|begin_of_text|>";
  for (int i = 0; i < 120; ++i) {
    const std::string n = std::to_string(i);
    code.append("x").append(n).append(" = ").append(n).append("\n");
  }
  std::vector<std::string> lines = {
      json({{"prompt", code}, {"max_tokens", 12}, {"mode", "vericache"}, {"ignore_eos", true}}).dump(),
      json({{"prompt", "<|begin_of_text|>def f(x):"}, {"max_tokens", 24}, {"mode", "full"},
            {"ignore_eos", true}}).dump()};
  auto run = [&](const std::string& name, const std::string& flag) {
    TempDir d(name);
    write_lines(d.path / "in.jsonl", lines);
    const fs::path trace = d.path / "trace.json";
    const auto r = run_batch_cli(batch_args(d, " --trace " + quoted(trace.string()) + flag));
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream in(trace);
    const json t = json::parse(in);
    std::map<uint64_t, size_t> slices;  // prefill slices per request
    for (const auto& e : t["traceEvents"])
      if (e["ph"] == "X" && e["name"] == "prefill") ++slices[e["args"]["request"].get<uint64_t>()];
    size_t most = 0;
    for (const auto& [id, n] : slices) most = std::max(most, n);
    std::vector<json> ids;
    for (const auto& j : read_results(d.path / "out.jsonl")) ids.push_back(j["output_ids"]);
    return std::pair{most, ids};
  };
  const auto [sliced_most, sliced_ids] = run("sliced", "");
  const auto [whole_most, whole_ids] = run("whole", " --whole-prefill");
  const auto [small_most, small_ids] = run("small-chunks", " --prefill-chunk 64");
  EXPECT_GT(sliced_most, 2u) << "the long prompt in chunks";
  EXPECT_EQ(1u, whole_most);
  // ~736 tokens: 12 chunks of 64 instead of 3 of 256 (the view's layers add as many
  // slices to both).
  EXPECT_GE(small_most, sliced_most + 6) << "chunks of 64 instead of 256";
  ASSERT_EQ(2u, whole_ids.size());
  EXPECT_EQ(sliced_ids, whole_ids);
  EXPECT_EQ(sliced_ids, small_ids);
  const auto refused = run_batch_cli("batch --input in.jsonl --output out.jsonl --prefill-chunk 0");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.out.find("--prefill-chunk"), std::string::npos) << refused.out;
}

TEST(cli_batch, output_order_is_input_order) {
  TempDir d("order");
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i)  // long requests first: they finish last
    lines.push_back(json({{"id", "req-" + std::to_string(i)},
                          {"prompt", "<|begin_of_text|>import os" + std::string(i % 3, '\n')},
                          {"max_tokens", 64 - 5 * i}, {"mode", i % 2 ? "full" : "vericache"},
                          {"ignore_eos", true}})
                        .dump());
  write_lines(d.path / "in.jsonl", lines);
  const auto r = run_batch_cli(batch_args(d, " --concurrency 6 --threads 1"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(res[size_t(i)]["id"], "req-" + std::to_string(i));
    EXPECT_EQ(res[size_t(i)]["output_ids"].size(), size_t(64 - 5 * i));
  }
}

TEST(cli_batch, a_missing_input_file_is_a_clear_error) {
  const auto r = run_batch_cli("batch --input /nonexistent/in.jsonl --output /tmp/x.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/in.jsonl"), std::string::npos) << r.out;
}

}  // namespace

namespace {

TEST(row_costs, a_curve_from_bench_rows_is_taken_by_generate_and_batch_and_output_stays_full_decoding) {
  TempDir d("row-costs");
  const fs::path curve = d.path / "rows.json";
  const auto bench = run_batch_cli("bench rows --context 128 --rows 1 4 16 --repeats 1 --json > " +
                                   quoted(curve.string()));
  ASSERT_EQ(bench.code, 0) << bench.out;
  const std::string prompt = quoted("def fib(n):\n    if n < 2:\n        return n\n");
  const auto full = run_batch_cli("generate --json --max-tokens 24 --mode full --prompt " + prompt);
  ASSERT_EQ(full.code, 0) << full.out;
  const auto auto_draft = run_batch_cli(
      "generate --json --max-tokens 24 --mode vericache --draft auto --row-costs " +
      quoted(curve.string()) + " --prompt " + prompt);
  ASSERT_EQ(auto_draft.code, 0) << auto_draft.out;
  const auto out_of = [](const std::string& text) {
    return json::parse(text.substr(text.find('{')))["output_ids"];
  };
  EXPECT_EQ(out_of(full.out), out_of(auto_draft.out));
  // batch takes the same file for every line.
  write_lines(d.path / "in.jsonl",
              {R"({"prompt": "def fib(n):", "max_tokens": 12, "mode": "vericache", "draft": "auto"})"});
  const auto b = run_batch_cli(batch_args(d, " --row-costs " + quoted(curve.string())));
  ASSERT_EQ(b.code, 0) << b.out;
  const auto results = read_results(d.path / "out.jsonl");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].contains("error")) << results[0].dump();
}

TEST(row_costs, a_row_cost_file_that_is_missing_or_not_bench_rows_json_is_an_error_naming_it) {
  TempDir d("row-costs-bad");
  const fs::path bad = d.path / "bad.json";
  write_lines(bad, {R"({"rows": [{"rows": 4, "ms_per_pass": 1.0}, {"rows": 2, "ms_per_pass": 2.0}]})"});
  for (const fs::path& f : {bad, d.path / "missing.json"}) {
    const auto r = run_batch_cli("generate --max-tokens 4 --mode vericache --draft auto --prompt x "
                                 "--row-costs " + quoted(f.string()));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--row-costs '" + f.string() + "'"), std::string::npos) << r.out;
  }
  // batch refuses it before touching the output.
  write_lines(d.path / "in.jsonl", {R"({"prompt": "x", "max_tokens": 2, "draft": "auto"})"});
  const auto b = run_batch_cli(batch_args(d, " --row-costs " + quoted(bad.string())));
  EXPECT_NE(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("--row-costs '" + bad.string() + "'"), std::string::npos) << b.out;
  EXPECT_FALSE(fs::exists(d.path / "out.jsonl"));
}

}  // namespace

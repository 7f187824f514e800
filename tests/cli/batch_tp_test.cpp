// `vericache batch --tp N`: the engine's tensor parallelism from the command line;
// each line's output equals `generate --tp N` for the same request.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("vc-batch-tp-test-" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<json> read_results(const fs::path& p) {
  std::ifstream in(p);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(cli_batch_tp, lines_at_degree_two_equal_generate_at_degree_two_kvzap_included) {
  TempDir d;
  const std::string prompt = "<|begin_of_text|>def add(a, b):";
  const std::vector<json> lines = {
      {{"prompt", prompt}, {"max_tokens", 20}, {"mode", "full"}, {"logprobs", true},
       {"ignore_eos", true}},
      {{"prompt", prompt}, {"max_tokens", 20}, {"mode", "vericache"}, {"compressor", "snapkv"},
       {"draft", 6}, {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", prompt}, {"max_tokens", 20}, {"mode", "vericache"}, {"compressor", "laprox"},
       {"draft", 4}, {"temperature", 0.8}, {"seed", 7}, {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", prompt}, {"max_tokens", 20}, {"mode", "vericache"}, {"compressor", "kvzap"},
       {"draft", 4}, {"logprobs", true}, {"ignore_eos", true}},
      {{"prompt", prompt}, {"max_tokens", 20}, {"mode", "vericache"}, {"compressor", "snapkv"},
       {"draft", "auto"}, {"logprobs", true}, {"ignore_eos", true}},
  };
  {
    std::ofstream in(d.path / "in.jsonl");
    for (const auto& l : lines) in << l.dump() << "\n";
  }
  const auto r = vc::test::run_vericache("batch --tp 2 --concurrency 4 --input " +
                                             (d.path / "in.jsonl").string() + " --output " +
                                             (d.path / "out.jsonl").string(),
                                         true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("5 requests, 5 ok, 0 failed | concurrency 4, 2 tensor-parallel ranks"),
            std::string::npos)
      << r.out;
  const auto res = read_results(d.path / "out.jsonl");
  ASSERT_EQ(res.size(), lines.size());
  const std::string args = "generate --tp 2 --json --logprobs --ignore-eos --max-tokens 20 --prompt '" +
                           prompt + "' ";
  const std::vector<std::string> same = {"--mode full",
                                         "--mode vericache --compressor snapkv --draft 6",
                                         "--mode vericache --compressor laprox --draft 4 "
                                         "--temperature 0.8 --seed 7"};
  for (size_t i = 0; i < same.size(); ++i) {
    ASSERT_FALSE(res[i].contains("error")) << res[i].dump();
    EXPECT_EQ(res[i]["stats"]["tensor_parallel"], 2);
    const auto g = json::parse(vc::test::run_vericache(args + same[i] + " 2>/dev/null", false).out);
    EXPECT_EQ(res[i]["output_ids"], g["output_ids"]) << i;
    EXPECT_EQ(res[i]["output_logprobs"].dump(), g["output_logprobs"].dump()) << i;
  }
  EXPECT_GT(res[1]["stats"]["vericache"]["rounds"].get<int>(), 0);
  // KVzap at degree 2: full decoding's bits.
  ASSERT_FALSE(res[3].contains("error")) << res[3].dump();
  EXPECT_EQ(res[3]["output_ids"], res[0]["output_ids"]);
  EXPECT_EQ(res[3]["output_logprobs"].dump(), res[0]["output_logprobs"].dump());
  // The adaptive draft length runs at degree 2 and decodes full decoding's bits.
  ASSERT_FALSE(res[4].contains("error")) << res[4].dump();
  EXPECT_EQ(res[4]["output_ids"], res[0]["output_ids"]);
  EXPECT_EQ(res[4]["output_logprobs"].dump(), res[0]["output_logprobs"].dump());
}

TEST(cli_batch_tp, a_degree_that_does_not_split_the_heads_or_a_budget_too_small_is_one_error_line_naming_the_flag) {
  TempDir d;
  { std::ofstream(d.path / "in.jsonl") << "{\"prompt\": \"x\"}\n"; }
  const auto r = vc::test::run_vericache("batch --tp 3 --input " + (d.path / "in.jsonl").string() +
                                             " --output " + (d.path / "out.jsonl").string(),
                                         true);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out,
            "error: --tp (EngineConfig.tp): tensor parallelism: degree 3 does not split the model's 4 "
            "attention heads\n");
  // The budget's error names the flag that sets it (and the engine's field).
  const auto small = vc::test::run_vericache("batch --fast-memory 1 --input " +
                                                 (d.path / "in.jsonl").string() + " --output " +
                                                 (d.path / "out.jsonl").string(),
                                             true);
  EXPECT_EQ(small.code, 1);
  EXPECT_EQ(small.out.rfind("error: --fast-memory (EngineConfig.fast_memory_bytes): 1 B does not cover", 0), 0u)
      << small.out;
}

TEST(cli_batch_tp, placement_auto_binds_every_rank_logs_where_and_decodes_as_unbound) {
  TempDir d;
  {
    std::ofstream in(d.path / "in.jsonl");
    in << json{{"prompt", "<|begin_of_text|>def add(a, b):"}, {"max_tokens", 12}, {"draft", 4},
               {"logprobs", true}, {"ignore_eos", true}}
              .dump()
       << "\n";
  }
  const std::string io = " --input " + (d.path / "in.jsonl").string() + " --output ";
  const auto unbound = vc::test::run_vericache("batch --tp 2" + io + (d.path / "a.jsonl").string(), true);
  ASSERT_EQ(unbound.code, 0) << unbound.out;
  EXPECT_EQ(unbound.out.find("placement:"), std::string::npos) << unbound.out;
  const auto bound = vc::test::run_vericache(
      "--log-level info batch --tp 2 --placement auto" + io + (d.path / "b.jsonl").string(), true);
  ASSERT_EQ(bound.code, 0) << bound.out;
  for (const char* actor : {"full tier rank 0", "full tier rank 1", "drafter rank 0", "verifier rank 0",
                            "mover rank 0", "drafter rank 1", "verifier rank 1", "mover rank 1"})
    EXPECT_NE(bound.out.find(std::string("[info] placement: ") + actor + ": "), std::string::npos)
        << actor << "\n" << bound.out;
  EXPECT_NE(bound.out.find("placement: 8 of 8 bound as planned"), std::string::npos) << bound.out;
  const auto a = read_results(d.path / "a.jsonl"), b = read_results(d.path / "b.jsonl");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0]["output_ids"], b[0]["output_ids"]);
  EXPECT_EQ(a[0]["output_logprobs"].dump(), b[0]["output_logprobs"].dump());

  const auto bad = vc::test::run_vericache("batch --placement numa" + io + (d.path / "c.jsonl").string(), true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.out, "error: --placement: numa not in {none,auto}\n");
}

}  // namespace

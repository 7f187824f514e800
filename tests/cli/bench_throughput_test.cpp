// `vericache bench throughput` run end to end on tiny sizes: the n-gram level's rows
// beside the drafter-alone rows, and the code-prompt kinds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

using nlohmann::json;

TEST(bench_throughput, draft_hierarchy_ngram_adds_rows_with_the_level_beside_the_rows_without_it) {
  const auto r = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 12 --base-requests 1 --no-disk --draft 8 "
      "--draft-hierarchy ngram --prompt-kind edit --json", /*merge_err=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt_kind"], "edit");
  std::set<std::string> with, without;
  for (const json& row : j["rows"]) {
    EXPECT_TRUE(row["all_ok"].get<bool>()) << row.dump();
    const std::string label = row["config"];
    (row["draft_hierarchy"] == "ngram" ? with : without).insert(label);
  }
  EXPECT_EQ(with, (std::set<std::string>{"(d) lock-step + n-gram", "(e) staggered + n-gram"}));
  EXPECT_TRUE(without.count("(d) VeriCache lock-step") && without.count("(e) VeriCache staggered"))
      << "the rows without the level stay, for the comparison";
}

TEST(bench_throughput, a_row_whose_requests_fail_says_why_in_the_table_and_the_json) {
  // At --ratio 1 a vericache request's view is as large as the full KV, so the
  // budget of one full-KV request cannot hold it beside its tail: its row fails,
  // and the reason is printed, not lost.
  const auto json_run = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 8 --base-requests 1 --draft 4 --no-disk "
      "--ratio 1 --configs a e --json", /*merge_err=*/false);
  ASSERT_EQ(json_run.code, 0) << json_run.out;
  const json j = json::parse(json_run.out);
  ASSERT_EQ(j["rows"].size(), 2u) << json_run.out;
  EXPECT_TRUE(j["rows"][0]["all_ok"].get<bool>());
  EXPECT_EQ(j["rows"][0]["error"], "");
  EXPECT_FALSE(j["rows"][1]["all_ok"].get<bool>());
  EXPECT_NE(j["rows"][1]["error"].get<std::string>().find("of fast memory"), std::string::npos)
      << j["rows"][1].dump();
  const auto table = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 8 --base-requests 1 --draft 4 --no-disk "
      "--ratio 1 --configs a e", /*merge_err=*/false);
  EXPECT_NE(table.out.find("FAILED 160 (e) VeriCache staggered: request: needs"), std::string::npos)
      << table.out;
}

TEST(bench_throughput, disk_dir_places_the_disk_rows_tier_and_a_file_there_is_named) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / "vc-bench-throughput-disk-dir";
  fs::remove_all(base);
  fs::create_directories(base);
  // A directory that does not exist yet is created for the tier (and kept).
  const fs::path dir = base / "tier";
  const auto ok = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 4 --base-requests 1 --draft 4 --configs e-disk "
      "--disk-dir " + dir.string() + " --json", /*merge_err=*/false);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(json::parse(ok.out)["rows"][0]["all_ok"].get<bool>()) << ok.out;
  EXPECT_TRUE(fs::is_directory(dir));
  // A regular file where the directory should be: the row fails, naming it.
  const fs::path file = base / "a-file";
  std::ofstream(file) << "not a directory\n";
  const auto bad = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 4 --base-requests 1 --draft 4 --configs e-disk "
      "--disk-dir " + file.string(), /*merge_err=*/true);
  EXPECT_NE(bad.out.find(file.string() + " is not a directory"), std::string::npos) << bad.out;
  // Contradictions are errors or warnings before any work.
  const auto no_disk = vc::test::run_vericache(
      "bench throughput --no-disk --disk-dir " + dir.string(), /*merge_err=*/true);
  EXPECT_EQ(no_disk.code, 1) << no_disk.out;
  EXPECT_NE(no_disk.out.find("--disk-dir places the disk-tier rows, but --no-disk skips them"),
            std::string::npos)
      << no_disk.out;
  const auto unused = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 4 --base-requests 1 --configs a --disk-dir " +
          dir.string(),
      /*merge_err=*/true);
  EXPECT_EQ(unused.code, 0) << unused.out;
  EXPECT_NE(unused.out.find("--disk-dir is not used: --configs names no disk-tier row"),
            std::string::npos)
      << unused.out;
  fs::remove_all(base);
}

TEST(bench_throughput, an_edit_prompt_needs_room_for_its_request_and_says_so) {
  const auto r = vc::test::run_vericache("bench throughput --contexts 8 --prompt-kind edit", /*merge_err=*/true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("too short for an edit request"), std::string::npos) << r.out;
}

TEST(bench_throughput, configs_runs_the_rows_named_with_the_full_kv_on_disk_for_the_disk_rows) {
  const auto r = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 8 --base-requests 1 --draft 4 "
      "--configs a b-disk e-disk --json", /*merge_err=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  std::vector<std::string> labels;
  for (const json& row : j["rows"]) {
    EXPECT_TRUE(row["all_ok"].get<bool>()) << row.dump();
    labels.push_back(row["config"]);
    const bool disk = labels.back().find("disk") != std::string::npos;
    EXPECT_EQ(row["disk_tier"].get<bool>(), disk) << row.dump();
    EXPECT_FALSE(row["simulated_link"].get<bool>()) << row.dump();
    EXPECT_GT(row["tokens_per_second"].get<double>(), 0) << row.dump();
    // Busy over the decode window beside busy over the engine's life. Row (b) decodes
    // in verify passes over the disk (draft 0): its drafter ran the prefill only, so
    // it is busy over the life and idle in the decode window (which begins once the
    // prefill is through: the drafter's last slice closes just after the scheduler
    // hears of it, a few microseconds).
    const json& life = row["busy_fraction"];
    const json& window = row["busy_fraction_decode"];
    for (const char* k : {"drafter", "mover", "verifier"}) {
      EXPECT_GE(window[k].get<double>(), 0.0) << k << " " << row.dump();
      EXPECT_LE(window[k].get<double>(), 1.0) << k << " " << row.dump();
    }
    if (labels.back().rfind("(b)", 0) == 0) {
      EXPECT_GT(life["drafter"].get<double>(), 0.0) << row.dump();
      EXPECT_LT(window["drafter"].get<double>(), 0.05) << row.dump();
      EXPECT_GT(window["verifier"].get<double>(), 0.0) << row.dump();
    } else {
      EXPECT_GT(window["drafter"].get<double>(), 0.0) << row.dump();
    }
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"(a) full KV in fast memory", "(b) full KV on disk",
                                              "(e) staggered, disk tier"}));
  const auto bad = vc::test::run_vericache("bench throughput --configs z", /*merge_err=*/true);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--configs"), std::string::npos) << bad.out;
}

TEST(bench_throughput, several_verify_batches_run_each_vericache_row_once_per_value_under_one_budget) {
  const auto r = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 8 --base-requests 3 --draft 4 --no-disk "
      "--configs a e --verify-batch 1 3 --json", /*merge_err=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["verify_batch"], json::array({1, 3}));
  std::vector<std::string> labels;
  std::set<size_t> budgets;
  for (const json& row : j["rows"]) {
    EXPECT_TRUE(row["all_ok"].get<bool>()) << row.dump();
    labels.push_back(row["config"]);
    budgets.insert(row["fast_budget_bytes"].get<size_t>());
    const double per_pass = row["verify_requests_per_pass"].get<double>();
    if (row["verify_batch"] == 1) {
      EXPECT_EQ(per_pass, 1.0) << row.dump();
    }
    if (row["verify_batch"] == 3) {
      EXPECT_GE(per_pass, 1.0) << row.dump();
      EXPECT_LE(per_pass, 3.0) << row.dump();
    }
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"(a) full KV in fast memory",
                                              "(e) VeriCache staggered [vb 1]",
                                              "(e) VeriCache staggered [vb 3]"}));
  EXPECT_EQ(budgets.size(), 1u) << "every row gets the same budget";
  const auto bad = vc::test::run_vericache("bench throughput --verify-batch 0", /*merge_err=*/true);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--verify-batch"), std::string::npos) << bad.out;
}

TEST(bench_throughput, several_compressors_run_each_viewed_row_once_per_compressor_under_one_budget) {
  const auto r = vc::test::run_vericache(
      "bench throughput --contexts 160 --gen-tokens 8 --base-requests 2 --draft 4 --no-disk "
      "--configs a c e --compressor snapkv kivi --json", /*merge_err=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  std::vector<std::string> labels, compressors;
  std::set<size_t> budgets;
  for (const json& row : j["rows"]) {
    EXPECT_TRUE(row["all_ok"].get<bool>()) << row.dump();
    labels.push_back(row["config"]);
    compressors.push_back(row["compressor"]);
    budgets.insert(row["fast_budget_bytes"].get<size_t>());
  }
  EXPECT_EQ(labels, (std::vector<std::string>{
                        "(a) full KV in fast memory", "(c) lossy (compressed only) [snapkv]",
                        "(e) VeriCache staggered [snapkv]", "(c) lossy (compressed only) [kivi]",
                        "(e) VeriCache staggered [kivi]"}));
  EXPECT_EQ(compressors, (std::vector<std::string>{"", "snapkv", "snapkv", "kivi", "kivi"}))
      << "full-KV rows have no view";
  EXPECT_EQ(budgets.size(), 1u) << "every row gets the same budget";
  const auto bad = vc::test::run_vericache("bench throughput --compressor snapkv nosuch", /*merge_err=*/true);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("nosuch"), std::string::npos) << bad.out;
}

TEST(bench_throughput, refuses_an_unknown_prompt_kind) {
  const auto r = vc::test::run_vericache("bench throughput --prompt-kind poetry", /*merge_err=*/true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--prompt-kind"), std::string::npos) << r.out;
}

}  // namespace

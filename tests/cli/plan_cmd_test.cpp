// `vericache plan`: prints every figure with its arithmetic; bad input is one line.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace vc {
namespace {

TEST(plan_cmd, prints_the_arithmetic_for_a_preset) {
  const auto r = test::run_vericache(
      "plan --preset llama-3-70b-2xh100-nvl --context 32768 --compressor snapkv --ratio 8", false);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"weights per GPU", "compressed views that fit in HBM", "full KV on NUMA node P#1",
                        "link time per verify round", "suggested concurrency", "suggested draft length"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  const auto j = nlohmann::json::parse(test::run_vericache(
      "plan --preset llama-3.1-8b-1xh200 --context 4096 --compressor snapkv --ratio 4 --json", false).out);
  EXPECT_EQ(j["tp"], 1);
  EXPECT_GT(j["concurrency"].get<int>(), 0);
}

TEST(plan_cmd, rejects_an_unknown_preset_with_one_error_line) {
  const auto r = test::run_vericache("plan --preset nope --context 1024", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out.rfind("error: --preset 'nope': unknown preset", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
}

TEST(plan_cmd, a_directory_given_as_preset_or_topology_is_named_as_one) {
  const std::string dir = ::testing::TempDir();
  auto r = test::run_vericache("plan --preset " + dir + " --context 1024", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--preset '" + dir + "': is a directory"), std::string::npos) << r.out;
  r = test::run_vericache("topo --topology " + dir, true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--topology '" + dir + "': is a directory"), std::string::npos) << r.out;
  r = test::run_vericache("topo --topology /nonexistent/t.xml", true);
  EXPECT_NE(r.out.find("'/nonexistent/t.xml': no such file"), std::string::npos) << r.out;
}

// A preset's topology was reported as "--topology '...'", an option never given; an
// empty one became the source root ("is a directory"); --topology '' fell back to the
// preset's (plan) or this machine (topo).
TEST(plan_cmd, a_bad_topology_path_names_where_it_came_from) {
  nlohmann::json j;
  std::ifstream(std::string(VC_TEST_DATA_DIR) + "/../../configs/presets/llama-3.1-8b-1xh200.json") >> j;
  const std::string file = ::testing::TempDir() + "vc_plan_topology_preset.json";
  j["topology"] = "nope.xml";
  std::ofstream(file) << j.dump();
  auto r = test::run_vericache("plan --preset " + file + " --context 1024", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("preset " + file + ": \"topology\" '"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nope.xml': no such file"), std::string::npos) << r.out;
  j["topology"] = "";
  std::ofstream(file) << j.dump();
  r = test::run_vericache("plan --preset " + file + " --context 1024", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("preset " + file + ": \"topology\" is empty"), std::string::npos) << r.out;
  std::filesystem::remove(file);
  r = test::run_vericache("plan --preset llama-3.1-8b-1xh200 --context 1024 --topology ''", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--topology '': empty path"), std::string::npos) << r.out;
  r = test::run_vericache("topo --topology ''", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--topology '': empty path"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vc

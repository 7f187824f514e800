// `vericache topo`: runs on this machine (placement applied and checked) and on a
// recorded topology (placement shown, nothing bound); bad input is one error line.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace vc {
namespace {

const std::string kTopologies = std::string(VC_TEST_DATA_DIR) + "/topologies/";

TEST(topo_cmd, places_and_binds_on_this_machine) {
  const auto r = test::run_vericache("topo --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["this_system"].get<bool>());
  EXPECT_FALSE(j["cores"].empty());
  EXPECT_EQ(j["placement"]["tp"], 1);
  EXPECT_EQ(j["placement"]["actors"].size(), 4u);
  ASSERT_EQ(j["applied"].size(), 5u);  // drafter, verifier, mover, fetcher, shard
  for (const auto& a : j["applied"]) EXPECT_TRUE(a["applied"].get<bool>()) << a.dump();
  const auto text = test::run_vericache("topo", false);
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("why:"), std::string::npos);
}

TEST(topo_cmd, shows_the_nvlink_pair_of_a_recorded_topology_without_binding) {
  const auto r = test::run_vericache("topo --topology " + kTopologies + "two_h100_nvl.xml --tp 2 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["this_system"].get<bool>());
  EXPECT_EQ(j["placement"]["gpus"], (nlohmann::json{"0000:18:00.0", "0000:98:00.0"}));
  EXPECT_EQ(j["placement"]["worst_link"], "nvlink");
  EXPECT_EQ(j["placement"]["shards"][1]["numa"], 1);
  for (const auto& a : j["applied"]) EXPECT_FALSE(a["applied"].get<bool>());
}

TEST(topo_cmd, rejects_bad_input_with_one_error_line) {
  for (const std::string& args : std::vector<std::string>{"topo --tp 0", "topo --topology /nonexistent.xml",
                                 "topo --topology " + kTopologies + "one_h200.xml --tp 2",
                                 "topo --topology " + kTopologies + "README.md"}) {
    const auto r = test::run_vericache(args, true);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace vc

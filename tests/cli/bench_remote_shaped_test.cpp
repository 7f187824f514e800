// tools/shaped-redis.sh and `bench remote --remote-link direct`: a redis-server in a
// network namespace, behind a veth pair shaped by tc's token bucket, reads at the
// shaped rate, and the bench runs every flow over that link, each equal to full
// decoding. Needs root and the kernel's veth and sch_tbf (`tools/shaped-redis.sh
// check`); skips saying so where the machine does not allow it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

// Runs `cmd` through the shell: its output (trailing newlines dropped) and whether
// it exited 0.
std::pair<std::string, bool> shell_out(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"popen failed", false};
  char buf[256];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return {out, status == 0};
}

TEST(bench_remote_shaped, a_store_behind_a_tc_shaped_veth_link_reads_at_the_shaped_rate) {
  const std::string script =
      (std::filesystem::path(VC_MODEL_DIR).parent_path().parent_path() / "tools" / "shaped-redis.sh").string();
  const int pid = int(getpid());
  // Names and a /24 of this process's own, so concurrent runs do not meet.
  const std::string env = "SHAPED_NAME=vct" + std::to_string(pid % 100000) + " SHAPED_NET=10.214." +
                          std::to_string(20 + pid % 200) + " SHAPED_PORT=6399 ";
  const auto [why, can] = shell_out(env + script + " check 2>&1");
  if (!can) GTEST_SKIP() << "this machine cannot shape a link with tc: " << (why.empty() ? "check failed" : why);
  struct Stop {
    std::string cmd;
    ~Stop() { (void)std::system(cmd.c_str()); }
  } stop{env + script + " stop"};
  const auto [url, started] = shell_out(env + script + " start 40mbit 2>&1");  // 5 MB/s
  ASSERT_TRUE(started) << url;
  ASSERT_EQ(url.rfind("redis://10.214.", 0), 0u) << url;

  const auto r = vc::test::run_vericache("bench remote --remote " + url +
                                             " --remote-link direct --lengths 200 --remote-chunk 64 "
                                             "--max-tokens 6 --json",
                                         false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["remote_link"], "direct");
  EXPECT_NE(j["link"].get<std::string>().find("reached directly at " + url), std::string::npos) << j["link"];
  // The 4 MiB probe reads at the token bucket's rate (less the headers' share).
  const double measured = j["remote_measured_bytes_per_second"].get<double>();
  EXPECT_GT(measured, 0.6 * 5e6) << measured;
  EXPECT_LT(measured, 1.1 * 5e6) << measured;
  ASSERT_EQ(j["runs"].size(), 9u);
  for (size_t i : {1, 4, 6}) EXPECT_GT(j["runs"][i]["full_chunks_hit"].get<int>(), 1) << j["runs"][i];
  for (size_t i : {2, 3, 5}) EXPECT_GT(j["runs"][i]["compressed_chunks_hit"].get<int>(), 1) << j["runs"][i];
}

}  // namespace

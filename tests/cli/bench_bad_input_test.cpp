// Bad input to the benches and to calibrate (found by probing): a request the
// engine refuses ends the bench with its reason instead of a 30-minute wait; a bad
// flag fails before `bench remote` clears the store; an unknown compressor is an
// error everywhere; calibrate refuses binary data and an --out that is its input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_support.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

TEST(bench_bad_input, a_request_the_engine_refuses_ends_bench_interleave_with_its_reason_at_once) {
  const auto r = vc::test::run_vericache(
      "bench interleave --decoding 1 --prompt-tokens 40000 --gen-tokens 4 --repeats 1 --long 64", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("a request ended before its first token: field 'prompt_ids'"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 60) << "it waited for a first token that could not come";
}

TEST(bench_bad_input, a_bad_flag_fails_before_bench_remote_touches_the_store) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const std::string port = server.url().substr(server.url().rfind(':') + 1);
  ASSERT_EQ(std::system(("redis-cli -p " + port + " set vc:kv:keep 1 > /dev/null").c_str()), 0);
  const std::pair<std::string, std::string> cases[] = {
      {"--compressor nosuch", "unknown compressor 'nosuch'"},
      {"--lengths 40000", "--lengths 40000 + --max-tokens 2 exceeds the model's context"},
      {"--ratio 0.5", "--ratio: expected a finite number in [1, 1000]"},
      {"--local-bandwidth nan", "--local-bandwidth: expected a finite number"}};
  for (const auto& [flags, says] : cases) {
    const auto r = vc::test::run_vericache(
        "bench remote --remote " + server.url() + " --lengths 256 --max-tokens 2 " + flags, true);
    EXPECT_EQ(r.code, 1) << flags << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << flags << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << flags << ": " << r.out;
  }
  FILE* p = popen(("redis-cli -p " + port + " get vc:kv:keep").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[16] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  pclose(p);
  EXPECT_EQ(std::string(buf, n), "1\n") << "the store's key was cleared";
}

TEST(bench_bad_input, bench_remote_mix_names_a_ratio_the_engine_would_refuse) {
  const auto r = vc::test::run_vericache("bench remote-mix --remote redis://127.0.0.1:1 --ratio 1e30", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--ratio"), std::string::npos) << r.out;
}

TEST(bench_bad_input, an_unknown_compressor_is_an_error_in_bench_attention) {
  const auto r = vc::test::run_vericache("bench attention --repeats 1 --contexts 64 --compressor nosuch", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("unknown compressor 'nosuch'"), std::string::npos) << r.out;
}

TEST(bench_bad_input, bench_throughput_says_when_no_disk_contradicts_the_rows_named) {
  const auto r = vc::test::run_vericache("bench throughput --no-disk --configs a e-disk", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--no-disk skips the disk-tier rows, but --configs names e-disk"), std::string::npos)
      << r.out;
}

TEST(bench_bad_input, calibrate_refuses_binary_data_and_an_out_that_is_its_input_or_empty) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "vc-calibrate-bad-input";
  std::filesystem::create_directories(dir);
  const std::string text = (dir / "text.txt").string(), binary = (dir / "binary.txt").string();
  std::ofstream(text) << "def f(x):\n    return x + 1\n";
  std::ofstream(binary, std::ios::binary) << std::string("def f(x):\0\0\1", 12);
  auto r = vc::test::run_vericache("calibrate kvzap --data " + binary + " --out " + (dir / "o.st").string(), true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("holds binary data"), std::string::npos) << r.out;
  r = vc::test::run_vericache("calibrate kvzap --data " + text + " --out " + text, true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the fit would write over its input"), std::string::npos) << r.out;
  std::ifstream in(text);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            "def f(x):\n    return x + 1\n");
  r = vc::test::run_vericache("calibrate kvzap --data " + text + " --out ''", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--out: expected a file path"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace

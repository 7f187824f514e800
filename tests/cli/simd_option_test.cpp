// `--simd PATH` (and $VERICACHE_SIMD): the CPU kernels' SIMD path chosen from the
// command line. Every path this CPU runs decodes the same tokens in vericache mode
// as in full mode (each path is exact on its own); a path it cannot run, or an
// unknown name, is one error line and exit 1. `--mmap` (and $VERICACHE_MMAP) maps
// the checkpoint instead of reading it, with the same output.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.hpp"
#include "tests/cli/generate_json.hpp"

namespace {

using vc::cpu::SimdPath;

const std::string kArgs =
    "--prompt 'def fib(n):\n    if n < 2:\n        return n\n' --max-tokens 24 --json "
    "--logprobs --ignore-eos --ratio 4";

size_t lines_of(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(simd_option, every_path_this_cpu_runs_decodes_vericache_equal_to_full_on_that_path) {
  for (SimdPath p : vc::cpu::kAllSimdPaths) {
    const std::string name(vc::cpu::simd_path_name(p));
    SCOPED_TRACE(name);
    if (!vc::cpu::simd_path_supported(p)) {
      const auto r = vc::test::run_vericache("--simd " + name + " generate " + kArgs, true);
      EXPECT_EQ(r.code, 1) << r.out;
      EXPECT_EQ(lines_of(r.out), 1u) << r.out;
      EXPECT_NE(r.out.find("this CPU cannot run"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(std::string(vc::cpu::simd_path_needs(p))), std::string::npos) << r.out;
      continue;
    }
    const auto f = vc::test::run_vericache("--simd " + name + " generate --mode full " + kArgs, false);
    const auto v = vc::test::run_vericache("--simd " + name + " generate --mode vericache " + kArgs, false);
    ASSERT_EQ(f.code, 0) << f.out;
    ASSERT_EQ(v.code, 0) << v.out;
    const auto fj = nlohmann::json::parse(f.out), vj = nlohmann::json::parse(v.out);
    EXPECT_EQ(fj["stats"]["simd"], name);
    EXPECT_EQ(vj["stats"]["simd"], name);
    ASSERT_EQ(fj["output_ids"].size(), 24u);
    vc::test::expect_same_tokens(fj, vj, "vericache vs full on " + name);
  }
}

TEST(simd_option, the_environment_variable_chooses_the_path_and_the_option_overrides_it) {
  const auto r = vc::test::run_vericache("generate " + kArgs, false);
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["stats"]["simd"],
            std::string(vc::cpu::simd_path_name(vc::cpu::best_simd_path())));
  const auto e = vc::test::run_vericache("generate " + kArgs, false, "VERICACHE_SIMD=scalar");
  ASSERT_EQ(e.code, 0);
  EXPECT_EQ(nlohmann::json::parse(e.out)["stats"]["simd"], "scalar");
  const std::string best(vc::cpu::simd_path_name(vc::cpu::best_simd_path()));
  const auto o = vc::test::run_vericache("--simd " + best + " generate " + kArgs, false,
                                         "VERICACHE_SIMD=scalar");
  ASSERT_EQ(o.code, 0);
  EXPECT_EQ(nlohmann::json::parse(o.out)["stats"]["simd"], best);
}

TEST(simd_option, an_unknown_path_is_one_error_line_naming_the_option_and_the_value) {
  const auto r = vc::test::run_vericache("--simd avx1024 generate " + kArgs, true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(lines_of(r.out), 1u) << r.out;
  EXPECT_NE(r.out.find("--simd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("avx1024"), std::string::npos) << r.out;
}

TEST(weights_option, mmap_maps_the_checkpoint_and_decodes_the_tokens_and_logprobs_of_a_read_one) {
  const auto read = vc::test::run_vericache("generate --mode vericache " + kArgs, false);
  const auto mapped = vc::test::run_vericache("--mmap generate --mode vericache " + kArgs, false);
  const auto env = vc::test::run_vericache("generate --mode vericache " + kArgs, false, "VERICACHE_MMAP=1");
  ASSERT_EQ(read.code, 0) << read.out;
  ASSERT_EQ(mapped.code, 0) << mapped.out;
  ASSERT_EQ(env.code, 0) << env.out;
  const auto rj = nlohmann::json::parse(read.out), mj = nlohmann::json::parse(mapped.out),
             ej = nlohmann::json::parse(env.out);
  EXPECT_EQ(rj["stats"]["weights"], "read");
  EXPECT_EQ(mj["stats"]["weights"], "mapped");
  EXPECT_EQ(ej["stats"]["weights"], "mapped");
  vc::test::expect_same_tokens(rj, mj, "--mmap against the default read");
}

}  // namespace

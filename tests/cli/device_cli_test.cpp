// --device cpu|cuda[:N] on the commands that run a model (generate, batch, serve,
// bench decode / rows / throughput): the CPU by default and reported, bad names and unusable GPUs
// refused with an error naming them.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

using vc::test::run_vericache;

const std::string kGenerate =
    "generate --prompt '<|begin_of_text|>def merge(a, b):' --max-tokens 12 --json --logprobs --ignore-eos";

TEST(cli_device, the_cpu_is_the_default_and_the_json_says_where_the_products_ran) {
  const auto dflt = run_vericache(kGenerate, false);
  ASSERT_EQ(dflt.code, 0) << dflt.out;
  const auto cpu = run_vericache(kGenerate + " --device cpu", false);
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  const auto a = nlohmann::json::parse(dflt.out), b = nlohmann::json::parse(cpu.out);
  EXPECT_EQ(a["stats"]["device"], "cpu");
  EXPECT_EQ(b["stats"]["device"], "cpu");
  EXPECT_EQ(b["stats"]["device_bytes"], 0) << "no device memory held on the CPU";
  EXPECT_EQ(a["output_ids"], b["output_ids"]);
  EXPECT_EQ(a["output_logprobs"].dump(), b["output_logprobs"].dump());
}

TEST(cli_device, a_name_other_than_cpu_or_cuda_n_is_refused_by_every_command_naming_it) {
  for (const std::string cmd : {"generate --prompt x", "batch --input /dev/null", "serve",
                                "bench decode --contexts 0", "bench rows", "bench throughput"}) {
    const auto r = run_vericache(cmd + " --device gpu1", true);
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_NE(r.out.find("--device"), std::string::npos) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("'gpu1'"), std::string::npos) << cmd << ": " << r.out;
  }
}

TEST(cli_device, cuda_without_a_usable_gpu_is_an_error_naming_the_device) {
  const auto r = run_vericache(kGenerate + " --device cuda:0", true);
  if (r.code == 0) GTEST_SKIP() << "this machine has a usable GPU: generate ran on cuda:0";
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cuda:0"), std::string::npos) << r.out;
  const auto batch = run_vericache("batch --input /dev/null --output /dev/null --device cuda:0", true);
  EXPECT_EQ(batch.code, 1) << batch.out;
  EXPECT_NE(batch.out.find("cuda:0"), std::string::npos) << batch.out;
  for (const std::string bench : {"bench decode --contexts 0 --repeats 1", "bench rows --rows 1 --repeats 1",
                                  "bench throughput --contexts 256 --configs a --gen-tokens 4"}) {
    const auto b = run_vericache(bench + " --device cuda:0", true);
    EXPECT_EQ(b.code, 1) << bench << ": " << b.out;
    EXPECT_NE(b.out.find("cuda:0"), std::string::npos) << bench << ": " << b.out;
  }
}

TEST(cli_device, a_gpu_memory_utilization_outside_zero_to_one_is_refused_by_every_command_naming_it) {
  for (const std::string cmd : {"generate --prompt x", "batch --input /dev/null --output /dev/null", "serve"}) {
    for (const std::string v : {"0", "1.5", "-0.2", "abc", "nan"}) {
      const auto r = run_vericache(cmd + " --gpu-memory-utilization " + v, true);
      EXPECT_EQ(r.code, 1) << cmd << " " << v << ": " << r.out;
      EXPECT_NE(r.out.find("--gpu-memory-utilization"), std::string::npos) << cmd << " " << v << ": " << r.out;
    }
  }
}

}  // namespace

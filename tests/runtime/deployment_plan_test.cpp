// `vericache plan` arithmetic on a preset: weights per GPU from the real shapes,
// views in HBM from the runtime's own fast_memory_need, full KV per NUMA node, link
// time per verify round, and the draft length DraftLengthPolicy picks.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/deployment_plan.hpp"
#include "runtime/fast_memory_need.hpp"
#include "tests/error_naming.hpp"
#include "tests/topology/edited_fixture.hpp"
#include "topology/hwloc_topology.hpp"

namespace vc {
namespace {

const std::filesystem::path kRoot = std::filesystem::path(VC_TEST_DATA_DIR) / ".." / "..";

DeploymentPreset preset(const std::string& name) {
  return load_preset(name, kRoot / "configs/presets", kRoot / "configs/shapes", kRoot);
}

DeploymentPlan plan(const std::string& name, const PlanRequest& req) {
  const DeploymentPreset p = preset(name);
  return plan_deployment(p, HwlocTopology(p.topology.string()).read(), req);
}

TEST(deployment_plan, sizes_llama_3_1_8b_on_one_h200_from_its_real_shape) {
  PlanRequest req;
  req.context = 32768;
  req.compressor = "snapkv";
  req.ratio = 8;
  const DeploymentPlan p = plan("llama-3.1-8b-1xh200", req);
  // Llama-3.1-8B has 8,030,261,248 parameters; bf16.
  EXPECT_EQ(p.weights_per_gpu, 8030261248ull * 2);
  // 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 B = 131072 B per position.
  EXPECT_EQ(p.full_kv_per_request, (32768ull + 256) * 131072);
  // 80% of the node's 128 GiB over 4.03 GiB per request.
  EXPECT_EQ(p.host_fit, 25u);
  // 32768 positions x 131072 B over the 63.015 GB/s hwloc reports for Gen5 x16.
  EXPECT_NEAR(p.link_seconds_per_request, 32768.0 * 131072 / 63.015385e9, 1e-6);

  // Views: the engine's own bound, into what HBM leaves after weights, reserve, staging.
  KvCacheConfig kv;
  kv.num_layers = 32;
  kv.kv_heads = 8;
  kv.head_dim = 128;
  DraftSpec spec;
  spec.prompt.assign(32768, 0);
  spec.compressor = "snapkv";
  spec.ratio = 8;
  spec.max_new_tokens = 256;
  const size_t need = fast_memory_need(spec, kv, 64).total();
  EXPECT_EQ(p.view_per_request, need);
  const double free_hbm = 146800640.0 * 1024 - double(p.weights_per_gpu) - 4.0 * (1ull << 30) -
                          double(engine_fast_overhead(kv, 1024, PlanRequest{}.verify_lanes));
  EXPECT_EQ(p.views_fit, size_t(free_hbm / double(need)));
  EXPECT_EQ(p.concurrency, std::min(p.views_fit, p.host_fit));
  EXPECT_GE(p.draft_length, 1u);
  EXPECT_LE(p.draft_length, 64u);
  EXPECT_GT(p.tokens_per_second, 0);
  for (const auto& f : p.figures) EXPECT_FALSE(f.arithmetic.empty()) << f.name;
}

TEST(deployment_plan, fits_more_views_at_a_higher_ratio_and_drafts_longer_with_better_acceptance) {
  PlanRequest req;
  req.context = 16384;
  req.ratio = 4;
  const DeploymentPlan four = plan("llama-3.1-8b-1xh200", req);
  req.ratio = 16;
  const DeploymentPlan sixteen = plan("llama-3.1-8b-1xh200", req);
  EXPECT_GT(sixteen.views_fit, 3 * four.views_fit);
  req.acceptance = 0.5;
  const DeploymentPlan low = plan("llama-3.1-8b-1xh200", req);
  req.acceptance = 0.95;
  const DeploymentPlan high = plan("llama-3.1-8b-1xh200", req);
  EXPECT_LT(low.draft_length, high.draft_length);
}

TEST(deployment_plan, shards_llama_3_70b_over_two_gpus_and_two_numa_nodes) {
  PlanRequest req;
  req.context = 8192;
  const DeploymentPlan p = plan("llama-3-70b-2xh100-nvl", req);
  // 70,553,706,496 parameters; each rank holds half but every norm (80 x 2 + 1 of 8192).
  EXPECT_EQ(p.weights_per_gpu, (70553706496ull + 161 * 8192) / 2 * 2);
  EXPECT_EQ(p.placement.shards[0].numa, 0u);
  EXPECT_EQ(p.placement.shards[1].numa, 1u);
  // 4 KV heads per rank: half of the unsharded 327680 B per position.
  EXPECT_EQ(p.full_kv_per_request, (8192ull + 256) * 163840);
}

TEST(deployment_plan, puts_both_qwen_shards_on_the_one_numa_node) {
  PlanRequest req;
  req.context = 8192;
  const DeploymentPlan p = plan("qwen2.5-32b-2gpu-1numa", req);
  EXPECT_EQ(p.placement.shards[0].numa, 0u);
  EXPECT_EQ(p.placement.shards[1].numa, 0u);
  // Both ranks' shards share node 0's 80% of 64 GiB.
  EXPECT_EQ(p.host_fit, size_t(0.8 * double(64ull << 30) / (2.0 * double(p.full_kv_per_request))));
}

TEST(deployment_plan, names_unknown_presets_and_bad_fields) {
  try {
    (void)preset("no-such-preset");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama-3.1-8b-1xh200"), std::string::npos) << e.what();
  }
  PlanRequest req;
  req.context = 1024;
  req.compressor = "no-such-method";
  EXPECT_THROW((void)plan("llama-3.1-8b-1xh200", req), Error);
  req.compressor = "snapkv";
  req.context = 0;
  EXPECT_THROW((void)plan("llama-3.1-8b-1xh200", req), Error);
}

TEST(deployment_plan, a_preset_file_with_a_bad_or_unknown_field_is_an_error_naming_it) {
  // Each ran before: a raw json exception, a vocabulary cut to 1, a reserve of 0 GiB,
  // a misspelt key ignored.
  nlohmann::json good;
  std::ifstream(kRoot / "configs/presets/llama-3.1-8b-1xh200.json") >> good;
  const auto file = std::filesystem::temp_directory_path() / "vc_preset_test.json";
  const auto error_of = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = good;
    j[key] = value;
    std::ofstream(file) << j.dump();
    try {
      (void)load_preset(file.string(), kRoot / "configs/presets", kRoot / "configs/shapes", kRoot);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_NE(error_of("kv_dtype", 16).find("\"kv_dtype\" must be bf16, f16 or f32, got 16"), std::string::npos);
  EXPECT_NE(error_of("vocab_size", 4294967297).find("\"vocab_size\" must be an integer from 1 to 2147483647"),
            std::string::npos);
  EXPECT_NE(error_of("reserve_gib", 1e30).find("\"reserve_gib\" must be a number > 0 and <= 1.04858e+06, got 1e+30"),
            std::string::npos)
      << error_of("reserve_gib", 1e30);
  const std::string unknown = error_of("kv-dtype", "f32");
  EXPECT_NE(unknown.find("unknown field \"kv-dtype\" (known: _comment, shape"), std::string::npos) << unknown;
  EXPECT_NE(error_of("host_memory_fraction", 1.5).find("\"host_memory_fraction\" must be a number > 0 and <= 1"),
            std::string::npos);
  EXPECT_EQ(error_of("reserve_gib", 8), "(loaded)");
  std::filesystem::remove(file);
}

// local_memory 0 or junk ("12abc" reads as 12 bytes) planned a concurrency of 0.
TEST(deployment_plan, a_shard_numa_node_without_room_for_one_request_is_an_error_naming_it) {
  PlanRequest req;
  req.context = 8192;
  const DeploymentPreset p = preset("llama-3-70b-2xh100-nvl");
  const std::string node1 = R"(gp_index="59" local_memory="274877906944")";
  const auto plan_with = [&](const std::string& memory) {
    const test::TempXml f(test::replace_first(test::topology_fixture_text("two_h100_nvl"), node1,
                                              R"(gp_index="59" local_memory=")" + memory + "\""));
    (void)plan_deployment(p, HwlocTopology(f.path()).read(), req);
  };
  test::expect_error_naming([&] { plan_with("0"); }, "NUMA node P#1 records no memory (local_memory 0)");
  test::expect_error_naming([&] { plan_with("12abc"); }, "NUMA node P#1 holds not one request's full KV");
  test::expect_error_naming([&] { plan_with("12abc"); }, "(12 bytes)");
}

}  // namespace
}  // namespace vc

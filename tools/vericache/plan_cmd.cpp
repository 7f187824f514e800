// `vericache plan`: memory and link arithmetic for a deployment preset
// (configs/presets): weights per GPU, compressed views that fit in HBM, full KV per
// NUMA node in host memory, link time per verify round, suggested concurrency and
// draft length, each with the arithmetic that produced it.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/deployment_plan.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "topology/hwloc_topology.hpp"

namespace vc::cli {

namespace {

struct PlanArgs {
  std::string preset;
  std::string topology;  // overrides the preset's when given
  bool topology_given = false;
  PlanRequest req;
  bool json = false;
};

int run_plan(const PlanArgs& a) {
  DeploymentPreset preset = load_preset(a.preset, VC_PRESETS_DIR, VC_SHAPES_DIR, VC_SOURCE_ROOT);
  std::string origin = "preset " + preset.file.string() + ": \"topology\" '" + preset.topology.string() + "'";
  if (a.topology_given) {
    if (a.topology.empty()) throw Error("--topology '': empty path; expected an hwloc XML file");
    preset.topology = a.topology;
    origin = "";  // --topology 'F'
  }
  const Topology topo = HwlocTopology(preset.topology.string(), origin).read();
  const DeploymentPlan plan = plan_deployment(preset, topo, a.req);
  if (a.json) {
    nlohmann::json j;
    j["preset"] = preset.name;
    j["topology"] = topo.source;
    j["tp"] = preset.tp;
    for (size_t g : plan.placement.gpus) j["gpus"].push_back(topo.gpus[g].pci.bus_id);
    j["weights_per_gpu"] = plan.weights_per_gpu;
    j["fast_memory_per_request"] = plan.view_per_request;
    j["views_fit"] = plan.views_fit;
    j["full_kv_per_request_per_rank"] = plan.full_kv_per_request;
    j["host_fit"] = plan.host_fit;
    j["link_seconds_per_request"] = plan.link_seconds_per_request;
    j["concurrency"] = plan.concurrency;
    j["draft_length"] = plan.draft_length;
    j["tokens_per_second_modelled"] = plan.tokens_per_second;
    for (const auto& f : plan.figures)
      j["figures"].push_back({{"name", f.name}, {"value", f.value}, {"unit", f.unit}, {"arithmetic", f.arithmetic}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const ModelConfig& c = preset.shape.parsed;
  std::cout << fmt::format("plan {}: {} ({} layers, {} heads, {} KV heads, vocab {}) tp {} on {}\n", preset.name,
                           preset.shape.name, c.num_layers, c.num_heads, c.num_kv_heads, c.vocab_size, preset.tp,
                           topo.source);
  std::string gpus;
  for (size_t g : plan.placement.gpus)
    gpus += (gpus.empty() ? "" : ", ") + topo.gpus[g].pci.bus_id + " (" + topo.gpus[g].model + ")";
  std::cout << fmt::format("  GPUs {}: {}\n", gpus, plan.placement.group_reason);
  std::cout << fmt::format("  request: {} context positions, {} x{}, up to {} new tokens\n\n", a.req.context,
                           a.req.compressor, a.req.ratio, a.req.max_tokens);
  for (const auto& f : plan.figures) std::cout << fmt::format("{}:\n    {}\n", f.name, f.arithmetic);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Memory and link arithmetic for a deployment preset");
  cmd->add_option("--preset", a->preset, "A preset name in configs/presets, or a JSON file")->required();
  cmd->add_option("--context", a->req.context, "Prompt positions per request")->required()
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("--compressor", a->req.compressor, "Compression method (vericache compressors)")
      ->capture_default_str();
  cmd->add_option("--ratio", a->req.ratio, "Compression ratio (full KV bytes / compressed bytes)")
      ->capture_default_str()->check(number_in(1, 1e6));
  cmd->add_option("--max-tokens", a->req.max_tokens, "New tokens per request")->capture_default_str()
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("--max-draft", a->req.max_draft, "Largest draft length")->capture_default_str()
      ->check(integer_in(1, 4096));
  cmd->add_option("--acceptance", a->req.acceptance, "Expected per-token draft acceptance")
      ->capture_default_str()->check(number_in(0, 0.999, true));
  cmd->add_option("--topology", a->topology, "A recorded hwloc XML topology instead of the preset's");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a, cmd] {
    a->topology_given = cmd->count("--topology") > 0;
    run = [a] { return run_plan(*a); };
  });
}

}  // namespace vc::cli

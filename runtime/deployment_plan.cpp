// Deployment arithmetic (see the header). Sizes per GPU follow tensor parallelism as
// the reference engines shard: q/o and gate/up/down split by heads and columns, k/v
// by KV heads (replicated when fewer than ranks), embedding and lm_head by vocabulary.
#include "runtime/deployment_plan.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kvtiers/tier_stats.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/model/bounded_input.hpp"

namespace vc {

namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1ull << 30)); }

DType dtype_field(const nlohmann::json& j, const char* key, const std::string& file) {
  if (j.contains(key) && !j[key].is_string())
    throw Error("preset " + file + ": \"" + key + "\" must be bf16, f16 or f32, got " + j[key].dump());
  const std::string s = j.value(key, std::string("bf16"));
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  if (s == "f32") return DType::f32;
  throw Error("preset " + file + ": \"" + key + "\" must be bf16, f16 or f32, got '" + s + "'");
}

double positive(const nlohmann::json& j, const char* key, const std::string& file, double most) {
  if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() > 0) || !(j[key].get<double>() <= most))
    throw Error("preset " + file + ": \"" + key + "\" must be a number > 0 and <= " + fmt::format("{:g}", most) +
                (j.contains(key) ? ", got " + j[key].dump() : ""));
  return j[key].get<double>();
}

// The fields a preset may have ("_comment" is documentation).
constexpr const char* kPresetFields[] = {"_comment",   "shape",        "topology",    "tp",
                                         "vocab_size", "weight_dtype", "kv_dtype",    "hbm_gbytes_s",
                                         "bf16_tflops", "reserve_gib", "host_memory_fraction"};

// Parameters one rank holds.
struct RankParams {
  double total = 0, per_layer = 0, embed = 0, lm_head = 0;
  size_t kv_heads = 0;
};

RankParams rank_params(const ModelConfig& c, size_t tp, const std::string& name) {
  auto check = [&](int n, const char* what) {
    if (size_t(n) % tp != 0)
      throw Error(fmt::format("preset {}: tp {} does not divide the {} {} of {}", name, tp, n, what,
                              c.arch_name));
  };
  check(c.num_heads, "attention heads");
  check(c.intermediate_size, "intermediate columns");
  if (size_t(c.num_kv_heads) >= tp) check(c.num_kv_heads, "KV heads");
  RankParams p;
  p.kv_heads = std::max<size_t>(1, size_t(c.num_kv_heads) / tp);
  const double h = c.hidden_size, hd = c.head_dim;
  const double q = double(c.num_heads) / double(tp) * hd, kv = double(p.kv_heads) * hd;
  const double ffn = double(c.intermediate_size) / double(tp);
  p.per_layer = h * q + 2 * h * kv + q * h + 3 * h * ffn + 2 * h;  // q, k, v, o, gate/up/down, norms
  if (c.attention_bias) p.per_layer += q + 2 * kv;
  if (c.qk_norm) p.per_layer += 2 * hd;
  p.embed = std::ceil(double(c.vocab_size) / double(tp)) * h;
  p.lm_head = c.tie_word_embeddings ? 0 : p.embed;
  p.total = p.per_layer * c.num_layers + p.embed + p.lm_head + h;
  return p;
}

}  // namespace

std::vector<std::string> preset_names(const std::filesystem::path& presets_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(presets_dir, ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

DeploymentPreset load_preset(const std::string& name_or_file, const std::filesystem::path& presets_dir,
                             const std::filesystem::path& shapes_dir, const std::filesystem::path& root) {
  std::filesystem::path file = name_or_file;
  {
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec))
      throw Error("--preset '" + name_or_file + "': is a directory; expected a preset name or a JSON file");
  }
  if (!(name_or_file.ends_with(".json") || std::filesystem::is_regular_file(file))) {
    file = presets_dir / (name_or_file + ".json");
    if (!std::filesystem::is_regular_file(file)) {
      std::string known;
      for (const auto& n : preset_names(presets_dir)) known += (known.empty() ? "" : ", ") + n;
      throw Error("--preset '" + name_or_file + "': unknown preset (known: " + known + ")");
    }
  }
  const std::string f = file.string();
  require_readable_file(f, "preset '" + f + "'");
  nlohmann::json j;
  try {
    std::ifstream in(file);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("preset " + f + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error("preset " + f + ": expected a JSON object");
  for (const auto& [key, value] : j.items())
    if (std::find_if(std::begin(kPresetFields), std::end(kPresetFields), [&](const char* k) { return key == k; }) ==
        std::end(kPresetFields)) {
      std::string known;
      for (const char* k : kPresetFields) known += (known.empty() ? "" : ", ") + std::string(k);
      throw Error("preset " + f + ": unknown field \"" + key + "\" (known: " + known + ")");
    }
  for (const char* key : {"shape", "topology"})
    if (!j.contains(key) || !j[key].is_string()) throw Error("preset " + f + ": \"" + key + "\" must be a string");
  DeploymentPreset p;
  p.name = file.stem().string();
  p.file = file;
  p.shape = load_shape(j["shape"].get<std::string>(), shapes_dir);
  if (j.contains("vocab_size")) {
    if (!j["vocab_size"].is_number_integer() || j["vocab_size"].get<int64_t>() < 1 ||
        j["vocab_size"].get<int64_t>() > INT32_MAX)
      throw Error("preset " + f + ": \"vocab_size\" must be an integer from 1 to 2147483647, got " +
                  j["vocab_size"].dump());
    p.shape.parsed.vocab_size = j["vocab_size"].get<int>();
  }
  p.topology = j["topology"].get<std::string>();
  if (p.topology.empty())
    throw Error("preset " + f + ": \"topology\" is empty; expected the path of an hwloc XML topology");
  if (p.topology.is_relative()) p.topology = root / p.topology;
  if (!j.contains("tp") || !j["tp"].is_number_integer() || j["tp"].get<int64_t>() < 1)
    throw Error("preset " + f + ": \"tp\" must be an integer >= 1");
  p.tp = j["tp"].get<size_t>();
  p.weight_dtype = dtype_field(j, "weight_dtype", f);
  p.kv_dtype = dtype_field(j, "kv_dtype", f);
  // Bounds far above any machine, so that the arithmetic stays in range (a reserve
  // of 2^20 GiB is 2^50 bytes).
  p.hbm_gbytes_s = positive(j, "hbm_gbytes_s", f, 1e9);
  p.bf16_tflops = positive(j, "bf16_tflops", f, 1e9);
  p.reserve_bytes = uint64_t(positive(j, "reserve_gib", f, double(1 << 20)) * double(1ull << 30));
  p.host_memory_fraction = positive(j, "host_memory_fraction", f, 1.0);
  return p;
}

DeploymentPlan plan_deployment(const DeploymentPreset& preset, const Topology& topo, const PlanRequest& req) {
  if (req.context == 0) throw Error("--context must be at least 1");
  if (topo.gpus.empty()) throw Error("topology " + topo.source + " has no GPU to plan for");
  const ModelConfig& c = preset.shape.parsed;
  DeploymentPlan plan;
  plan.placement = plan_placement(topo, preset.tp);
  auto add = [&](std::string name, double v, std::string unit, std::string how) {
    plan.figures.push_back({std::move(name), v, std::move(unit), std::move(how)});
  };

  // Weights per GPU.
  const RankParams rp = rank_params(c, preset.tp, preset.name);
  const size_t wsize = dtype_size(preset.weight_dtype);
  plan.weights_per_gpu = size_t(rp.total) * wsize;
  add("weights per GPU", double(plan.weights_per_gpu), "bytes",
      fmt::format("({} layers x {:.0f} + embedding {:.0f} + lm_head {:.0f} + norm {}) params x {} B = {}; "
                  "{} KV head(s) per rank of {}",
                  c.num_layers, rp.per_layer, rp.embed, rp.lm_head, c.hidden_size, wsize,
                  gib(double(plan.weights_per_gpu)), rp.kv_heads, c.num_kv_heads));

  // Compressed views in HBM: what the engine would reserve per request.
  KvCacheConfig kv;
  kv.num_layers = size_t(c.num_layers);
  kv.kv_heads = rp.kv_heads;
  kv.head_dim = size_t(c.head_dim);
  kv.block_tokens = req.block_tokens;
  kv.dtype = preset.kv_dtype;
  DraftSpec spec;
  spec.prompt.assign(req.context, 0);
  spec.mode = DecodeMode::vericache;
  spec.compressor = req.compressor;
  spec.ratio = req.ratio;
  spec.max_new_tokens = req.max_tokens;
  const FastNeed need = fast_memory_need(spec, kv, req.max_draft);
  plan.view_per_request = need.total();
  const size_t overhead = engine_fast_overhead(kv, req.stage_positions, req.verify_lanes);
  uint64_t hbm = UINT64_MAX;
  double link = 1e300;
  for (size_t g : plan.placement.gpus) {
    hbm = std::min(hbm, topo.gpus[g].memory_bytes);
    link = std::min(link, topo.gpus[g].pci.link_gbytes_s);
  }
  if (hbm == 0) throw Error("topology " + topo.source + " records no GPU memory size (CUDAGlobalMemorySize)");
  if (!(link > 0)) throw Error("topology " + topo.source + " records no PCIe link speed for the GPUs");
  const double used = double(plan.weights_per_gpu) + double(preset.reserve_bytes) + double(overhead);
  if (used >= double(hbm))
    throw Error(fmt::format("preset {}: weights {} + reserve {} + staging {} exceed the GPU's {}", preset.name,
                            gib(double(plan.weights_per_gpu)), gib(double(preset.reserve_bytes)),
                            gib(double(overhead)), gib(double(hbm))));
  const double free_hbm = double(hbm) - used;
  plan.views_fit = size_t(free_hbm / double(plan.view_per_request));
  add("HBM free for KV per GPU", free_hbm, "bytes",
      fmt::format("{} HBM - {} weights - {} reserve - {} verify/prefill staging = {}", gib(double(hbm)),
                  gib(double(plan.weights_per_gpu)), gib(double(preset.reserve_bytes)), gib(double(overhead)),
                  gib(free_hbm)));
  add("fast memory per request per GPU", double(plan.view_per_request), "bytes",
      fmt::format("fast_memory_need: {} at {} positions, {} x{}, up to {} new tokens, drafts <= {}",
                  need.describe(), req.context, req.compressor, req.ratio, req.max_tokens, req.max_draft));
  add("compressed views that fit in HBM", double(plan.views_fit), "requests",
      fmt::format("floor({} / {}) = {}", gib(free_hbm), gib(double(plan.view_per_request)), plan.views_fit));

  // Full KV in host memory, per NUMA node.
  const size_t per_token = 2 * kv.num_layers * kv.kv_heads * kv.head_dim * dtype_size(kv.dtype);
  plan.full_kv_per_request = (req.context + req.max_tokens) * per_token;
  plan.host_fit = SIZE_MAX;
  for (const auto& node : topo.numa) {
    size_t ranks = 0;
    for (const auto& s : plan.placement.shards) ranks += s.numa == node.os_index ? 1 : 0;
    if (ranks == 0) continue;
    if (node.memory_bytes == 0)
      throw Error(fmt::format("topology {}: NUMA node P#{} records no memory (local_memory 0), yet holds the "
                              "full-KV shard of {} rank(s)",
                              topo.source, node.os_index, ranks));
    const double cap = preset.host_memory_fraction * double(node.memory_bytes);
    const double per_req = double(ranks * plan.full_kv_per_request);
    const size_t fit = size_t(cap / per_req);
    if (fit == 0)
      throw Error(fmt::format("topology {}: NUMA node P#{} holds not one request's full KV: {:.0f}% of its {} "
                              "({} bytes) is less than {} shard(s) x {} positions = {}",
                              topo.source, node.os_index, 100 * preset.host_memory_fraction,
                              gib(double(node.memory_bytes)), node.memory_bytes, ranks,
                              req.context + req.max_tokens, gib(per_req)));
    plan.host_fit = std::min(plan.host_fit, fit);
    add(fmt::format("full KV on NUMA node P#{}", node.os_index), per_req, "bytes per request",
        fmt::format("{} shard(s) x ({} + {}) positions x {} B/position = {}; {:.0f}% of {} holds floor({} / {}) = {} "
                    "requests",
                    ranks, req.context, req.max_tokens, per_token, gib(per_req), 100 * preset.host_memory_fraction,
                    gib(double(node.memory_bytes)), gib(cap), gib(per_req), fit));
  }
  plan.concurrency = std::min(plan.views_fit, plan.host_fit);
  add("suggested concurrency", double(plan.concurrency), "requests",
      fmt::format("min(views in HBM {}, full KV in host memory {}) = {}: throughput grows with concurrency "
                  "until the link carries nothing else, so memory is the bound",
                  plan.views_fit, plan.host_fit, plan.concurrency));

  // Link time of a verify round: each rank streams its shard over its own PCIe link.
  plan.link_seconds_per_request = double(req.context * per_token) / (link * 1e9);
  const double batch = double(std::max<size_t>(1, plan.concurrency));
  add("link time per verify round", batch * plan.link_seconds_per_request, "seconds",
      fmt::format("{} requests x {} positions x {} B / {:.2f} GB/s (PCIe, per rank, ranks in parallel) = "
                  "{:.1f} ms ({:.2f} ms per request)",
                  batch, req.context, per_token, link, 1e3 * batch * plan.link_seconds_per_request,
                  1e3 * plan.link_seconds_per_request));

  // Draft length: DraftLengthPolicy over a modelled draft step and verify pass.
  const double hbm_bw = preset.hbm_gbytes_s * 1e9, flops = preset.bf16_tflops * 1e12;
  const double t_draft = (double(plan.weights_per_gpu) + batch * double(need.view)) / hbm_bw;
  auto verify = [&](double rows) {
    return double(plan.weights_per_gpu) / hbm_bw + batch * plan.link_seconds_per_request +
           batch * rows * 2 * rp.total / flops;
  };
  DraftLengthPolicy policy = DraftLengthPolicy::adaptive(req.max_draft);
  policy.set_prior(req.acceptance, t_draft);
  const double top = double(req.max_draft + 1);
  policy.set_row_costs({{1, verify(1)}, {top, verify(top)}});
  plan.draft_length = policy.next(req.max_draft + 2);
  plan.tokens_per_second = batch * policy.expected_rate(plan.draft_length);
  add("draft step", t_draft, "seconds",
      fmt::format("({} weights + {} x {} views) / {:.0f} GB/s HBM = {:.2f} ms", gib(double(plan.weights_per_gpu)),
                  batch, gib(double(need.view)), preset.hbm_gbytes_s, 1e3 * t_draft));
  add("verify pass of L+1 rows", verify(1), "seconds",
      fmt::format("{} / {:.0f} GB/s + link {:.1f} ms + {} x rows x 2 x {:.3g} params / {:.0f} TFLOPS = {:.1f} ms "
                  "at 1 row, {:.1f} ms at {} rows",
                  gib(double(plan.weights_per_gpu)), preset.hbm_gbytes_s, 1e3 * batch * plan.link_seconds_per_request,
                  batch, rp.total, preset.bf16_tflops, 1e3 * verify(1), 1e3 * verify(top), req.max_draft + 1));
  add("suggested draft length", double(plan.draft_length), "tokens",
      fmt::format("DraftLengthPolicy: L maximising (1 - a^(L+1)) / (1 - a) / (L x draft + verify(L+1)) with "
                  "acceptance a = {}, L <= {}: L = {}, about {:.0f} tokens/s over {} requests (modelled)",
                  req.acceptance, req.max_draft, plan.draft_length, plan.tokens_per_second, batch));
  return plan;
}

}  // namespace vc

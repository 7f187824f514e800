// Planning a deployment from a preset (configs/presets/*.json: a model shape, a
// recorded topology, a tensor-parallel degree, datasheet bandwidths): weights per
// GPU, how many requests' compressed views fit in HBM, the full KV per NUMA node in
// host memory, the link time of a verify round, and the concurrency and draft length
// to start from. Every figure keeps the arithmetic that produced it. Memory bounds
// come from the runtime's own fast_memory_need / engine_fast_overhead and the draft
// length from DraftLengthPolicy, so the plan and the engine agree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/model/model_shape.hpp"
#include "topology/placement.hpp"

namespace vc {

struct DeploymentPreset {
  std::string name;
  std::filesystem::path file;
  ModelShape shape;             // vocab_size set to the preset's (the real model's)
  std::filesystem::path topology;
  size_t tp = 1;
  DType weight_dtype = DType::bf16, kv_dtype = DType::bf16;
  double hbm_gbytes_s = 0;      // per GPU, datasheet
  double bf16_tflops = 0;       // per GPU, dense, datasheet
  uint64_t reserve_bytes = 0;   // HBM kept for activations, CUDA context, workspace
  double host_memory_fraction = 0.8;  // of each NUMA node's memory the full tier may use
};

/// The preset names in `presets_dir` (*.json stems), sorted.
[[nodiscard]] std::vector<std::string> preset_names(const std::filesystem::path& presets_dir);

/// `name_or_file`: a preset name in `presets_dir` or a JSON file. The shape is a
/// name in `shapes_dir`, the topology a path relative to `root` (or absolute).
/// Throws vc::Error naming the file and field.
[[nodiscard]] DeploymentPreset load_preset(const std::string& name_or_file,
                                           const std::filesystem::path& presets_dir,
                                           const std::filesystem::path& shapes_dir,
                                           const std::filesystem::path& root);

struct PlanRequest {
  size_t context = 0;          // prompt positions per request
  std::string compressor = "snapkv";
  double ratio = 4.0;          // full KV bytes / compressed bytes
  size_t max_tokens = 256;     // generated per request
  size_t max_draft = 64;       // the adaptive draft length's cap
  double acceptance = 0.8;     // expected per-token acceptance of drafts
  size_t block_tokens = kDefaultBlockTokens;
  size_t stage_positions = 1024;
  size_t verify_lanes = 4;     // requests per verify pass (EngineConfig::verify_batch's default)
};

/// One figure and how it was computed.
struct PlanFigure {
  std::string name;
  double value = 0;
  std::string unit;
  std::string arithmetic;
};

struct DeploymentPlan {
  Placement placement;
  size_t weights_per_gpu = 0;        // bytes
  size_t view_per_request = 0;       // fast memory per request per GPU (bytes)
  size_t views_fit = 0;              // requests whose views fit in every GPU's HBM
  size_t full_kv_per_request = 0;    // per rank, host memory (bytes)
  size_t host_fit = 0;               // requests whose full KV fits every NUMA node
  double link_seconds_per_request = 0;  // one verify round streams this much per rank
  size_t concurrency = 0;
  size_t draft_length = 0;
  double tokens_per_second = 0;      // at the suggested concurrency and draft length
  std::vector<PlanFigure> figures;   // in the order they are derived
};

/// Computes the plan; throws vc::Error when the model does not fit (naming what).
[[nodiscard]] DeploymentPlan plan_deployment(const DeploymentPreset& preset, const Topology& topo,
                                             const PlanRequest& req);

}  // namespace vc

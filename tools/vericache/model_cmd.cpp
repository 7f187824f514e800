// `vericache model random|scale`: write a checkpoint of a real model's shape without
// downloading one (configs/shapes/*.json): random weights from a seed, or the bundled
// model padded with zeros so that it computes the same tokens at the shape's cost.
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "runtime/model/random_model.hpp"
#include "runtime/model/scaled_model.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct ModelArgs {
  std::string shape;
  std::string out;
  std::string seed = "0";
  std::string dtype = "bf16";
  std::string model_dir = default_model_dir();
  size_t max_shard_mb = 5000;
  int threads = 0;
};

DType parse_dtype_option(const std::string& s) {
  return s == "f32" ? DType::f32 : s == "f16" ? DType::f16 : DType::bf16;
}

void report(const char* what, const std::string& out, const GeneratedModel& g, double seconds) {
  std::cout << fmt::format("{}: wrote {} ({} parameters, {:.3f} GB in {} file{}) in {:.1f} s\n",
                           what, out, g.checkpoint.parameters, double(g.checkpoint.total_bytes) / 1e9,
                           g.checkpoint.files.size(), g.checkpoint.files.size() == 1 ? "" : "s",
                           seconds);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_random(const ModelArgs& a) {
  const ModelShape shape = load_shape(a.shape, VC_SHAPES_DIR);
  RandomModelOptions opt;
  opt.seed = parse_seed("seed", a.seed);
  opt.dtype = parse_dtype_option(a.dtype);
  opt.max_shard_bytes = a.max_shard_mb << 20;
  opt.threads = a.threads;
  opt.tokenizer_dir = default_model_dir();
  const auto t0 = std::chrono::steady_clock::now();
  const GeneratedModel g = write_random_model(shape, a.out, opt);
  report("model random", a.out, g, since(t0));
  return 0;
}

int run_scale(const ModelArgs& a) {
  const ModelShape shape = load_shape(a.shape, VC_SHAPES_DIR);
  ScaleOptions opt;
  opt.dtype = parse_dtype_option(a.dtype);
  opt.max_shard_bytes = a.max_shard_mb << 20;
  opt.threads = a.threads;
  const auto t0 = std::chrono::steady_clock::now();
  const GeneratedModel g = write_scaled_model(a.model_dir, shape, a.out, opt);
  report("model scale", a.out, g, since(t0));
  return 0;
}

void add_common(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--shape", a.shape, "A shape name in configs/shapes, or a JSON file")->required();
  cmd->add_option("--out", a.out, "Output directory (created; must be empty or hold an "
                                  "earlier generated checkpoint)")->required();
  cmd->add_option("--dtype", a.dtype, "Weight dtype")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--max-shard-mb", a.max_shard_mb, "Largest safetensors shard (MiB of tensors)")
      ->capture_default_str()->check(integer_in(1, 1 << 24));
  cmd->add_option("--threads", a.threads, "Threads generating weights (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
}

}  // namespace

void add_model_command(CLI::App& app, Runner& run) {
  CLI::App* model = app.add_subcommand("model", "Write checkpoints of real model shapes");
  model->require_subcommand(1);
  auto r = std::make_shared<ModelArgs>();
  CLI::App* random = model->add_subcommand("random", "Random weights of a shape, from a seed");
  add_common(random, *r);
  random->add_option("--seed", r->seed, "Seed, 0..2^64-1")->capture_default_str()->check(seed_value());
  random->callback([&run, r] { run = [r] { return run_random(*r); }; });

  auto s = std::make_shared<ModelArgs>();
  CLI::App* scale = model->add_subcommand(
      "scale", "A model padded with zeros to a shape: same tokens, the shape's cost");
  add_common(scale, *s);
  scale->add_option("--model", s->model_dir, "Source model directory")->capture_default_str();
  scale->callback([&run, s] { run = [s] { return run_scale(*s); }; });
}

}  // namespace vc::cli

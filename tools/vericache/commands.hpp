// Subcommands of the `vericache` CLI: each registers its options on the app and
// returns the function that runs it.
#pragma once
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace vc::cli {

/// Runs a parsed subcommand; returns the process exit code.
using Runner = std::function<int()>;

void add_generate_command(CLI::App& app, Runner& run);
void add_bench_command(CLI::App& app, Runner& run);
void add_compressors_command(CLI::App& app, Runner& run);
void add_batch_command(CLI::App& app, Runner& run);
void add_model_command(CLI::App& app, Runner& run);
void add_serve_command(CLI::App& app, Runner& run);
void add_topo_command(CLI::App& app, Runner& run);
void add_plan_command(CLI::App& app, Runner& run);
void add_cache_command(CLI::App& app, Runner& run);
void add_calibrate_command(CLI::App& app, Runner& run);

/// The bundled model's directory (compiled in; VERICACHE_MODEL overrides).
[[nodiscard]] std::string default_model_dir();

}  // namespace vc::cli

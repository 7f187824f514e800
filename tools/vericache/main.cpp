// vericache: command-line entry point (generate, batch, serve, bench, compressors, model, topo,
// plan, cache, calibrate).
//
// Exit codes: 0 success; 1 bad input (an option, a config file, a model file, a
// request), always with exactly one "error: ..." line on stderr; 2 an internal error;
// 128 + signo after SIGINT, SIGTERM or SIGHUP (the disk tier's scratch deleted).
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/safetensors.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/interrupt.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("VERICACHE_MODEL"); env != nullptr && *env != '\0') return env;
  return VC_DEFAULT_MODEL_DIR;
}

}  // namespace vc::cli

namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitInternal = 2;

// CLI11 reports a --config directory as "not readable (missing?)": check first.
void check_config_path(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string path;
    if (arg == "--config" && i + 1 < argc) path = argv[i + 1];
    else if (arg.starts_with("--config=")) path = arg.substr(9);
    else continue;
    vc::require_readable_file(path, "--config '" + path + "'");
  }
}

// --simd / $VERICACHE_SIMD: a known path this CPU runs, else one line naming both.
void select_simd_path(const std::string& name) {
  vc::cpu::SimdPath p;
  try {
    p = vc::cpu::simd_path_from_name(name);
  } catch (const vc::Error& e) {
    throw vc::Error(std::string("--simd: ") + e.what());
  }
  if (!vc::cpu::simd_path_supported(p)) {
    throw vc::Error("--simd " + name + ": this CPU cannot run that path (it needs " +
                    std::string(vc::cpu::simd_path_needs(p)) + "; best: " +
                    std::string(vc::cpu::simd_path_name(vc::cpu::best_simd_path())) + ")");
  }
  vc::cpu::set_simd_path(p);
}

/// "A subcommand is required" as the user would say it: the word that named no
/// command of the level it was read at, or that a command is missing there, with the
/// level's commands.
std::string missing_command(CLI::App& app, int argc, char** argv) {
  const auto find = [](CLI::App* level, const std::string& word) -> CLI::App* {
    for (CLI::App* s : level->get_subcommands({}))
      if (s->check_name(word)) return s;
    return nullptr;
  };
  const auto names = [](CLI::App* level) {
    std::string out;
    for (CLI::App* s : level->get_subcommands({})) out += (out.empty() ? "" : ", ") + s->get_name();
    return out;
  };
  CLI::App* at = &app;
  std::string path = "vericache";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind('-', 0) == 0) {  // an option: skip its value unless given with '='
      const CLI::Option* o = at->get_option_no_throw(arg.substr(0, arg.find('=')));
      if (arg.find('=') != std::string::npos || (o != nullptr && o->get_expected_min() == 0)) continue;
      // Known and taking a value, or unknown here (a deeper command's option, given
      // before its command): the next word is its value unless it names a command.
      if (i + 1 < argc && std::string(argv[i + 1]).rfind('-', 0) != 0 &&
          (o != nullptr || find(at, argv[i + 1]) == nullptr))
        ++i;
      continue;
    }
    CLI::App* sub = find(at, arg);
    if (sub == nullptr) return "'" + path + "' has no command '" + arg + "' (its commands: " + names(at) + ")";
    at = sub;
    path += " " + arg;
  }
  return "'" + path + "' needs a command (one of: " + names(at) + ")";
}

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("vericache");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"VeriCache: lossless KV-cache compression by draft-and-verify decoding"};
  app.require_subcommand(1);
  CLI::Option* config_option =
      app.set_config("--config", "", "Read options from a config file (see configs/defaults.conf)");
  auto config = std::make_shared<vc::cli::StrictConfig>(app, config_option);
  app.config_formatter(config);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::string simd;
  app.add_option("--simd", simd,
                 "SIMD path of the CPU kernels: scalar, avx2, avx512, avx512bf16 or amx "
                 "(default: avx512bf16 on AMD CPUs with AVX512_BF16, else the best of the "
                 "first three this CPU runs; avx512bf16 and amx round activations to bf16 in "
                 "bf16-weight matmuls, the others keep them in f32; amx runs only when chosen)")
      ->envname("VERICACHE_SIMD");
  bool mmap_weights = false;
  app.add_flag("--mmap", mmap_weights,
               "Map checkpoint files instead of reading them into memory (loads without "
               "copying and shares pages with other processes; decode reads 4 KiB "
               "page-cache pages more slowly)")
      ->envname("VERICACHE_MMAP");
  vc::cli::Runner run;
  vc::cli::add_generate_command(app, run);
  vc::cli::add_bench_command(app, run);
  vc::cli::add_compressors_command(app, run);
  vc::cli::add_batch_command(app, run);
  vc::cli::add_model_command(app, run);
  vc::cli::add_serve_command(app, run);
  vc::cli::add_topo_command(app, run);
  vc::cli::add_plan_command(app, run);
  vc::cli::add_cache_command(app, run);
  vc::cli::add_calibrate_command(app, run);
  try {
    check_config_path(argc, argv);
    app.parse(argc, argv);
    if (!simd.empty()) select_simd_path(simd);
    if (mmap_weights) vc::set_weight_load(vc::WeightLoad::map);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string what = e.what();
    vc::cli::report_error(what == "A subcommand is required" ? missing_command(app, argc, argv) : what,
                          config.get());
    return kExitBadInput;
  } catch (const vc::Error& e) {
    vc::cli::report_error(e.what(), config.get());
    return kExitBadInput;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    // SIGINT, SIGTERM, SIGHUP: delete the disk tier's scratch, exit 128 + signo.
    vc::cli::install_interrupt_handlers();
    const int rc = run();
    vc::cli::wait_if_interrupted();
    return rc;
  } catch (const vc::Error& e) {
    vc::cli::wait_if_interrupted();
    vc::cli::report_error(e.what(), config.get());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    vc::cli::wait_if_interrupted();
    vc::cli::report_error("internal error: out of memory", nullptr);
    return kExitInternal;
  } catch (const std::exception& e) {
    vc::cli::wait_if_interrupted();
    vc::cli::report_error(std::string("internal error: ") + e.what(), nullptr);
    return kExitInternal;
  }
}

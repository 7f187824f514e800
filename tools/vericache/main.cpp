// vericache: command-line entry point (generate, bench, batch, compressors).
#include <cstdlib>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "kernels/error.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/interrupt.hpp"

namespace vc::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("VERICACHE_MODEL"); env != nullptr && *env != '\0') return env;
  return VC_DEFAULT_MODEL_DIR;
}

}  // namespace vc::cli

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("vericache");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"VeriCache: lossless KV-cache compression by draft-and-verify decoding"};
  app.require_subcommand(1);
  app.set_config("--config", "", "Read options from a config file (see configs/defaults.conf)");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  vc::cli::Runner run;
  vc::cli::add_generate_command(app, run);
  vc::cli::add_bench_command(app, run);
  vc::cli::add_compressors_command(app, run);
  vc::cli::add_batch_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    // SIGINT, SIGTERM, SIGHUP: delete the disk tier's scratch, exit 128 + signo.
    vc::cli::install_interrupt_handlers();
    return run();
  } catch (const vc::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("unexpected failure: {}", e.what());
    return 2;
  }
}

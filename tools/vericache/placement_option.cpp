// --placement and its log lines (see the header).
#include "tools/vericache/placement_option.hpp"

#include <spdlog/spdlog.h>

#include <vericache/engine.hpp>

namespace vc::cli {

void add_placement_option(CLI::App& cmd, std::string& placement) {
  cmd.add_option("--placement", placement,
                 "Thread placement: none (the OS places threads), or auto (plan for this "
                 "machine's topology as `vericache topo --tp N` does, bind each rank's drafter, "
                 "verifier and mover threads to its cores and their memory to its NUMA node, "
                 "each net fetcher near the NIC; logged at start)")
      ->capture_default_str()->check(CLI::IsMember({"none", "auto"}));
}

void log_placement(const vericache::Engine& engine) {
  for (const auto& line : engine.placement()) {
    if (line.applied)
      spdlog::info("placement: {}: {}", line.what, line.detail);
    else
      spdlog::warn("placement: {}: {}", line.what, line.detail);
  }
}

}  // namespace vc::cli

// --placement none|auto of the engine commands (batch, serve), and the log lines
// saying where the engine's threads were bound.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace vericache {
class Engine;
}

namespace vc::cli {

/// --placement into `placement` (EngineConfig::placement).
void add_placement_option(CLI::App& cmd, std::string& placement);
/// One info line per bound actor ("placement: drafter rank 0: 2 threads bound to
/// PU 0, ..."), a warning for one that did not bind.
void log_placement(const vericache::Engine& engine);

}  // namespace vc::cli

// Running the built `vericache` binary from the CLI tests.
#pragma once
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace vc::test {

/// What one run of the CLI gave: exit status, output, wall time.
struct CliRun {
  int code = -1;
  std::string out;  // stdout (and stderr when merged)
  double seconds = 0;
};

/// Runs `vericache ARGS` through the shell (ARGS as shell words); stderr goes into
/// `out` when `merge_err`, else it is dropped. `env`: assignments (NAME=value ...)
/// put before the command.
inline CliRun run_vericache(const std::string& args, bool merge_err,
                            const std::string& env = "") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(VC_CLI_PATH) + " " +
                          args + (merge_err ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r;
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace vc::test

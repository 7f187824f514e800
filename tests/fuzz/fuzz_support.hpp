// Shared by the libFuzzer targets: a private scratch directory per fuzzing process
// and a way to put the input bytes into a file there, for the entry points that
// read files (the same calls the CLI makes, not a parallel in-memory path).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace vc::fuzz {

/// A directory of this process, created on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/vc_fuzz_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

/// Writes `bytes` to `name` in the scratch directory (replacing it) and returns its path.
inline std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) std::abort();
  return p;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace vc::fuzz

// Byte counters of a KV tier (held, read, written), for budgets and for the stats
// the CLI reports.
#pragma once
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>

namespace vc {

/// Bytes of KV one tier holds now, and has read and written since it was built.
struct TierBytes {
  size_t held = 0;
  size_t read = 0;
  size_t written = 0;

  TierBytes& operator+=(const TierBytes& o) {
    held += o.held;
    read += o.read;
    written += o.written;
    return *this;
  }
  friend bool operator==(const TierBytes&, const TierBytes&) = default;
};

/// "1.50 MiB" style: B, KiB, MiB, GiB with two decimals past bytes.
[[nodiscard]] inline std::string format_bytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " B";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

/// One line for logs: "<name>: held 1.50 MiB, read 12.00 MiB, written 1.50 MiB".
[[nodiscard]] inline std::string format_tier_bytes(std::string_view name, const TierBytes& b) {
  return std::string(name) + ": held " + format_bytes(b.held) + ", read " + format_bytes(b.read) +
         ", written " + format_bytes(b.written);
}

}  // namespace vc

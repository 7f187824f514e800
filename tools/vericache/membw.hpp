// Measured memory read bandwidth of this machine (bytes/s), for bench tables.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vc::cli {

/// Sums a buffer far larger than the caches several times; best pass wins.
inline double measure_read_bandwidth(size_t bytes = size_t(512) << 20, int passes = 5) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
      s0 += buf[i];
      s1 += buf[i + 1];
      s2 += buf[i + 2];
      s3 += buf[i + 3];
    }
    sink = sink + s0 + s1 + s2 + s3;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(bytes) / s);
  }
  return best;
}

}  // namespace vc::cli

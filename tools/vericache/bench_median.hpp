// The median the remote benches quote: the middle value, or the mean of the two
// middle ones for an even count (0 for none).
#pragma once
#include <algorithm>
#include <vector>

namespace vc::cli {

[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace vc::cli

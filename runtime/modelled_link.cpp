// Transfers over a modelled link, one after another (see modelled_link.hpp).
#include "runtime/modelled_link.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/error.hpp"

namespace vc {

ModelledLink::ModelledLink(double bytes_per_second) : bps_(bytes_per_second) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second))
    throw Error(fmt::format("modelled link: the bandwidth must be positive and finite, got {:g} bytes/s",
                            bytes_per_second));
}

std::chrono::steady_clock::time_point advance_saturated(std::chrono::steady_clock::time_point from,
                                                        double seconds,
                                                        std::chrono::steady_clock::time_point origin) {
  using D = std::chrono::steady_clock::duration;
  constexpr double kCentury = 3.0e9;
  const auto cap = origin + std::chrono::duration_cast<D>(std::chrono::duration<double>(kCentury));
  const auto length = std::chrono::duration_cast<D>(std::chrono::duration<double>(std::min(seconds, kCentury)));
  return from >= cap || cap - from <= length ? cap : from + length;
}

ModelledLink::clock::time_point ModelledLink::book(clock::time_point begin, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_ = advance_saturated(std::max(begin, free_), double(bytes) / bps_, begin);
  return free_;
}

}  // namespace vc

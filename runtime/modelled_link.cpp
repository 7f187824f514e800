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

ModelledLink::clock::time_point ModelledLink::book(clock::time_point begin, size_t bytes) {
  // The link is booked at most a century past `begin`: saturated, not wrapped (a
  // time out of the clock's range came out negative, and a link slower than a
  // byte per second did not wait at all).
  constexpr double kCentury = 3.0e9;
  const double secs = std::min(double(bytes) / bps_, kCentury);
  const auto length = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(secs));
  const auto cap = begin + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(kCentury));
  std::lock_guard<std::mutex> lock(mu_);
  const clock::time_point from = std::max(begin, free_);
  free_ = from >= cap || cap - from <= length ? cap : from + length;
  return free_;
}

}  // namespace vc

// Transfers over a modelled link, one after another (see modelled_link.hpp).
#include "runtime/modelled_link.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/error.hpp"

namespace vc {

ModelledLink::ModelledLink(double bytes_per_second) : bps_(bytes_per_second) {
  // Below a byte per second a transfer's time leaves the clock's range.
  if (!(bytes_per_second >= 1) || !std::isfinite(bytes_per_second))
    throw Error(fmt::format("modelled link: the bandwidth must be at least 1 byte/s and finite, got {:g} bytes/s",
                            bytes_per_second));
}

ModelledLink::clock::time_point ModelledLink::book(clock::time_point begin, size_t bytes) {
  // At most a century per transfer (saturated, not wrapped: a time out of the
  // clock's range would come out negative and the link would not wait at all).
  const double secs = std::min(double(bytes) / bps_, 3.0e9);
  const auto length = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(secs));
  std::lock_guard<std::mutex> lock(mu_);
  free_ = std::max(begin, free_) + length;
  return free_;
}

}  // namespace vc

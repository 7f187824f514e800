// Transfers over a modelled link, one after another (see modelled_link.hpp).
#include "runtime/modelled_link.hpp"

#include <algorithm>
#include <string>

#include "kernels/error.hpp"

namespace vc {

ModelledLink::ModelledLink(double bytes_per_second) : bps_(bytes_per_second) {
  if (!(bytes_per_second > 0))
    throw Error("modelled link: the bandwidth must be positive, got " + std::to_string(bytes_per_second));
}

ModelledLink::clock::time_point ModelledLink::book(clock::time_point begin, size_t bytes) {
  const auto length = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(double(bytes) / bps_));
  std::lock_guard<std::mutex> lock(mu_);
  free_ = std::max(begin, free_) + length;
  return free_;
}

}  // namespace vc

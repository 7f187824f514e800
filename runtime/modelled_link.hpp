// A modelled link to the full tier (the PCIe or network link of a GPU deployment,
// on a machine whose full tier is host memory): transfers over it take their turn,
// each bytes / bandwidth long, so the streamers that share it (a rank's verify
// lanes) share its bandwidth instead of each getting all of it.
#pragma once
#include <chrono>
#include <cstddef>
#include <mutex>

namespace vc {

/// `from` plus `seconds`, saturated at a century past `origin`: a time past the
/// clock's range wrapped negative, and a link slower than a byte per second did
/// not wait at all. The links' bookings (ModelledLink, the bench's throttling
/// proxy) advance with it.
[[nodiscard]] std::chrono::steady_clock::time_point advance_saturated(std::chrono::steady_clock::time_point from,
                                                                      double seconds,
                                                                      std::chrono::steady_clock::time_point origin);

class ModelledLink {
 public:
  using clock = std::chrono::steady_clock;
  /// bytes_per_second > 0.
  explicit ModelledLink(double bytes_per_second);

  [[nodiscard]] double bytes_per_second() const { return bps_; }
  /// Books a transfer of `bytes` that began at `begin`: it ends bytes / bandwidth
  /// after the later of `begin` and the end of the transfers booked before it.
  /// Returns that end (the caller waits until then). Thread-safe.
  [[nodiscard]] clock::time_point book(clock::time_point begin, size_t bytes);

 private:
  double bps_;
  std::mutex mu_;
  clock::time_point free_{};  // when the last booked transfer ends
};

}  // namespace vc

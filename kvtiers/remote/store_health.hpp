// Whether the remote store is worth asking now. After a transport fault (the store
// cannot be reached, a deadline passed, a connection dropped) it is skipped for a
// while: each request admitted meanwhile recomputes its prefix locally at once
// instead of waiting for its own deadline in turn, and the write-behind publisher
// drops what it would have sent. The first request after the pause tries again.
#pragma once
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace vc {

class StoreHealth {
 public:
  using clock = std::chrono::steady_clock;
  /// `retry_after`: how long the store is skipped after a fault (0: never skipped).
  explicit StoreHealth(std::chrono::milliseconds retry_after) : retry_after_(retry_after) {}

  /// "" when the store may be asked at `now`; else why it is skipped (the fault, how
  /// long ago, when it is tried again). Each skip is counted.
  [[nodiscard]] std::string skip_reason(clock::time_point now = clock::now());
  /// A transport fault at `now`: skip the store until now + retry_after.
  void failed(const std::string& why, clock::time_point now = clock::now());
  /// The store answered: nothing to skip.
  void answered();
  /// Fetches or publish batches skipped so far.
  [[nodiscard]] size_t skipped() const;
  [[nodiscard]] std::chrono::milliseconds retry_after() const { return retry_after_; }

 private:
  const std::chrono::milliseconds retry_after_;
  mutable std::mutex mu_;
  bool down_ = false;
  clock::time_point failed_at_{};
  std::string why_;
  size_t skipped_ = 0;
};

}  // namespace vc

// An in-process TCP proxy on a loopback port that throttles a link: it forwards
// both ways between its clients and an upstream store, and paces the store-to-
// client bytes of all its connections together to `bytes_per_second` (a shared
// token bucket), so a store on loopback behaves like one behind a slower network.
// `vericache bench remote` puts it in front of the store; the figures it prints
// say "throttled by an in-process proxy" and the rate.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vc::cli {

/// The schedule of a paced link: bytes pass in order at `bytes_per_second`. Time the
/// sender loses between reservations (a late wake-up, a send, the next recv) is made
/// up within `slack`, so a link kept busy delivers its nominal rate; idle time beyond
/// `slack` is not banked (after a pause at most `slack` worth of bytes pass at once).
class LinkPacer {
 public:
  using Clock = std::chrono::steady_clock;
  LinkPacer(double bytes_per_second, Clock::duration slack, Clock::time_point start)
      : rate_(bytes_per_second), slack_(slack), next_free_(start) {}
  /// Reserves the link for `n` bytes asked for at `now`: when they have passed it.
  Clock::time_point reserve(size_t n, Clock::time_point now);

 private:
  double rate_;
  Clock::duration slack_;
  Clock::time_point next_free_;  // when the link is idle again
};

class ThrottledProxy {
 public:
  /// Listens on a free loopback port; throws vc::Error naming the upstream when it
  /// cannot. bytes_per_second 0: unthrottled.
  ThrottledProxy(std::string upstream_host, int upstream_port, double bytes_per_second);
  ~ThrottledProxy();
  ThrottledProxy(const ThrottledProxy&) = delete;
  ThrottledProxy& operator=(const ThrottledProxy&) = delete;

  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  /// Store-to-client bytes forwarded so far.
  [[nodiscard]] size_t reply_bytes() const { return reply_bytes_; }

 private:
  void accept_loop();
  void pump(int from, int to, bool throttled);
  /// Blocks until `n` more bytes may pass.
  void pace(size_t n);

  std::string host_;
  int upstream_port_ = 0, port_ = 0, listen_fd_ = -1;
  double rate_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> reply_bytes_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;  // the pumps, added by the accept thread under mu_
  std::thread accept_thread_;
  LinkPacer pacer_;  // under mu_
};

}  // namespace vc::cli

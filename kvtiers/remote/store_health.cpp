// The remote store's skip window after a transport fault (see the header).
#include "kvtiers/remote/store_health.hpp"

#include <cstdio>

namespace vc {

namespace {

std::string format_seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

std::string StoreHealth::skip_reason(clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!down_ || retry_after_.count() <= 0 || now >= failed_at_ + retry_after_) return "";
  ++skipped_;
  return "store skipped: it failed " + format_seconds(now - failed_at_) + " ago (" + why_ +
         "); tried again " + format_seconds(failed_at_ + retry_after_ - now) +
         " from now (--remote-retry-ms " + std::to_string(retry_after_.count()) + ")";
}

void StoreHealth::failed(const std::string& why, clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = true;
  failed_at_ = now;
  why_ = why;
}

void StoreHealth::answered() {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = false;
}

size_t StoreHealth::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

}  // namespace vc

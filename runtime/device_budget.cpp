// device_kv_budget (runtime/device_budget.hpp).
#include "runtime/device_budget.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/tier_stats.hpp"  // format_bytes

namespace vc {
namespace {

std::string fraction(double u) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", u);
  return buf;
}

}  // namespace

size_t device_kv_budget(const DeviceMemory& memory, double utilization, const std::string& device,
                        size_t host_available) {
  if (!(utilization > 0.0 && utilization <= 1.0))
    throw Error("gpu memory utilization: expected a fraction in (0, 1], got " + fraction(utilization));
  if (memory.total == 0 || memory.free > memory.total)
    throw Error("device " + device + ": cannot tell its memory (free " + format_bytes(memory.free) +
                " of " + format_bytes(memory.total) + ")");
  const double allowed = std::floor(utilization * double(memory.total));
  const double used = double(memory.total - memory.free);
  if (allowed <= used)
    throw Error("device " + device + ": no memory left for the KV cache: " + format_bytes(memory.total - memory.free) +
                " of its " + format_bytes(memory.total) + " already in use (the model's weights and " +
                "other processes) against a utilization of " + fraction(utilization) +
                " (" + format_bytes(size_t(allowed)) + "); raise it or give a fast-memory budget");
  // Half of it: the device's copy of the cache grows by reallocation (the old and
  // the new copy held at once while it copies), and views have copies of their own.
  const size_t budget = size_t((allowed - used) / 2);
  return host_available > 0 ? std::min(budget, host_available / 2) : budget;
}

size_t host_available_memory() {
  size_t available = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    size_t kib = 0;
    while (in >> key >> kib) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        available = kib * 1024;
        break;
      }
    }
  }
  // A container's memory limit (cgroup v2), which /proc/meminfo does not show.
  std::ifstream max_in("/sys/fs/cgroup/memory.max"), cur_in("/sys/fs/cgroup/memory.current");
  std::string max_text;
  size_t current = 0, limit = 0;
  if (max_in >> max_text && cur_in >> current &&  // "max": no limit; anything unreadable: none known
      std::from_chars(max_text.data(), max_text.data() + max_text.size(), limit).ec == std::errc()) {
    const size_t room = limit > current ? limit - current : 0;
    available = available > 0 ? std::min(available, room) : room;
  }
  return available;
}

}  // namespace vc

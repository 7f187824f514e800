// device_kv_budget (runtime/device_budget.hpp).
#include "runtime/device_budget.hpp"

#include <cmath>
#include <cstdio>
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

size_t device_kv_budget(const DeviceMemory& memory, double utilization, const std::string& device) {
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
                " (" + format_bytes(size_t(allowed)) + "); raise it or give --fast-memory");
  return size_t(allowed - used);
}

}  // namespace vc

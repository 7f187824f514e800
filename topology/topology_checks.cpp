// Checks on what a topology records (see the header).
#include "topology/topology_checks.hpp"

#include <cmath>
#include <cstdio>
#include <set>

#include "kernels/error.hpp"

namespace vc {

void check_topology(const Topology& t) {
  const std::string file = "topology " + t.source;
  std::set<unsigned> nodes;
  for (const NumaNode& n : t.numa) {
    if (!nodes.insert(n.os_index).second)
      throw Error(file + ": two NUMA nodes have os_index " + std::to_string(n.os_index));
    if (n.memory_bytes > kMaxRecordedMemoryBytes)
      throw Error(file + ": NUMA node P#" + std::to_string(n.os_index) + " records " +
                  std::to_string(n.memory_bytes) + " bytes of memory (local_memory), more than 1 PiB");
  }
  std::set<std::string> buses;
  for (const Gpu& g : t.gpus) {
    const std::string& id = g.pci.bus_id;
    if (id == "0000:00:00.0")
      throw Error(file + ": a GPU (" + (g.model.empty() ? "PCI device" : g.model) +
                  ") has no pci_busid (hwloc reads it as 0000:00:00.0, the host bridge's address)");
    if (!buses.insert(id).second) throw Error(file + ": two GPUs have bus id " + id);
    const double s = g.pci.link_gbytes_s;
    if (!std::isfinite(s) || s < 0 || s > kMaxPciLinkGBytesS)
    {
      char v[64];
      std::snprintf(v, sizeof v, "%g", s);
      throw Error(file + ": GPU " + id + " records a PCIe link speed (pci_link_speed) of " + v +
                  " GB/s; expected 0 (unknown) up to " + std::to_string(int(kMaxPciLinkGBytesS)));
    }
  }
}

uint64_t parse_gpu_memory_kib(const std::string& value, const std::string& what) {
  const uint64_t most = kMaxRecordedMemoryBytes / 1024;
  uint64_t kib = 0;
  bool ok = !value.empty() && value.size() <= 20;
  for (char c : value) {
    if (!ok) break;
    ok = c >= '0' && c <= '9';
    if (ok) kib = kib * 10 + uint64_t(c - '0');
    ok = ok && kib <= most;
  }
  if (!ok || kib == 0)
    throw Error(what + ": CUDAGlobalMemorySize '" + value + "' must be a whole number of KiB from 1 to " +
                std::to_string(most) + " (1 PiB)");
  return kib * 1024;
}

}  // namespace vc

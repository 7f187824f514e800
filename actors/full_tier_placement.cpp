// Binding each rank's host full tier to a NUMA node (EngineConfig::placement "auto").
#include "actors/full_tier_placement.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "kvtiers/full_tier.hpp"
#include "runtime/device.hpp"
#include "topology/binding.hpp"
#include "topology/hwloc_topology.hpp"

namespace vc::actors {

std::vector<vericache::PlacementLine> place_full_tiers(const std::vector<std::unique_ptr<FullTier>>& tiers,
                                                       const std::shared_ptr<HwlocTopology>& topo,
                                                       const Topology& seen, const Placement& plan,
                                                       const Device& device) {
  std::vector<vericache::PlacementLine> lines;
  for (size_t r = 0; r < tiers.size(); ++r) {
    auto* host = dynamic_cast<HostFullTier*>(tiers[r].get());
    if (host == nullptr) continue;
    vericache::PlacementLine line{"full tier rank " + std::to_string(r), false, ""};
    std::optional<unsigned> node;
    std::string whose;
    if (!device.is_cpu()) {
      const std::string bus = cuda_pci_bus_id(device.index);
      const Gpu* gpu = bus.empty() ? nullptr : seen.gpu_at(bus);
      if (gpu != nullptr && !gpu->pci.numa.empty()) {
        node = gpu->pci.numa.front();
        whose = device.str() + "'s, PCI " + bus;
      } else {
        whose = (bus.empty() ? device.str() + "'s PCI address unknown"
                             : "PCI " + bus + " not in the topology") + "; ";
      }
    }
    if (!node && r < plan.shards.size()) {
      node = plan.shards[r].numa;
      whose += "the rank's";
    }
    if (!node) {
      line.detail = "not bound: no NUMA node for it (" + whose + ")";
      lines.push_back(line);
      continue;
    }
    void* probe = nullptr;
    std::string err = posix_memalign(&probe, 4096, 4096) == 0 ? bind_area(*topo, probe, 4096, *node)
                                                              : "cannot allocate a probe page";
    std::vector<unsigned> landed;
    if (err.empty()) {
      std::memset(probe, 0, 4096);
      landed = area_nodes(*topo, probe, 4096);
    }
    std::free(probe);
    if (!err.empty()) {
      line.detail = "not bound: " + err;
    } else {
      const unsigned n = *node;
      host->set_memory_placer([topo, n](void* p, size_t bytes) { (void)bind_area(*topo, p, bytes, n); });
      line.applied = landed == std::vector<unsigned>{n};
      line.detail = "chunks bound to node P#" + std::to_string(n) + " (" + whose + "); a probe page landed on P#" +
                    (landed.empty() ? std::string("?") : std::to_string(landed.front()));
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace vc::actors

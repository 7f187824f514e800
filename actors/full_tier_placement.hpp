// EngineConfig::placement "auto" for the full tiers: each rank's host full tier
// allocates its chunks on one NUMA node -- the GPU's, when the model runs on one the
// topology knows (by its PCI address), else the rank's node in the plan.
#pragma once
#include <memory>
#include <vector>

#include "actors/vericache/engine.hpp"
#include "topology/placement.hpp"
#include "topology/topology.hpp"

namespace vc {
class FullTier;
class HwlocTopology;
struct Device;
}  // namespace vc

namespace vc::actors {

/// Binds every host tier of `tiers` (one per rank; disk tiers read into staging
/// buffers and are skipped) after a probe page bound there lands there; one line per
/// host tier saying what was bound, or why not.
std::vector<vericache::PlacementLine> place_full_tiers(const std::vector<std::unique_ptr<FullTier>>& tiers,
                                                       const std::shared_ptr<HwlocTopology>& topo,
                                                       const Topology& seen, const Placement& plan,
                                                       const Device& device);

}  // namespace vc::actors

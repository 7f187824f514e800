// Placement for a tensor-parallel degree on a topology: which GPUs form the group,
// the cores of each actor's threads, the NUMA node of each GPU's shard of the full
// KV, and the network fetcher's core, each with the reason it was chosen.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace vc {

/// One actor's threads: the cores (logical) and their hardware threads (OS indexes).
struct ActorPlace {
  std::string actor;  // "drafter", "verifier", "mover", "fetcher"
  int rank = -1;      // tensor-parallel rank; -1 for the fetcher (one per process)
  std::vector<unsigned> cores;
  std::vector<unsigned> pus;
  std::string reason;
};

/// Where rank `rank`'s shard of the full KV lives in host memory.
struct ShardPlace {
  size_t rank = 0;
  unsigned numa = 0;  // OS index
  std::string reason;
};

struct Placement {
  size_t tp = 1;
  /// Topology GPU index per rank; empty when the topology has no GPU (CPU ranks).
  std::vector<size_t> gpus;
  LinkClass worst_link = LinkClass::nvlink;  // over the group's pairs (nvlink for one GPU)
  std::string group_reason;
  std::vector<ActorPlace> actors;  // per rank: drafter, verifier, mover; then the fetcher
  std::vector<ShardPlace> shards;  // per rank
  /// The actor `name` of `rank` (throws vc::Error when absent).
  [[nodiscard]] const ActorPlace& actor(const std::string& name, int rank) const;
};

/// Chooses the placement. The group is the one whose worst pairwise link is best
/// (NVLink, then same switch, same host bridge, same NUMA node), ties broken by the
/// sum over its pairs, then by bus id order. Each rank's drafter, verifier and mover
/// run on cores local to its GPU's PCIe root (its package or NUMA node), split
/// between ranks that share them; the mover gets a core of its own when there are
/// two or more; the fetcher a core local to the NIC. Without GPUs the ranks are CPU
/// ranks spread over the NUMA nodes, and a CPU rank's drafter, verifier and mover
/// each span all of the rank's cores (the drafter and verifier are the compute).
/// Throws vc::Error when tp is 0 or exceeds the GPUs.
[[nodiscard]] Placement plan_placement(const Topology& topo, size_t tp);

}  // namespace vc

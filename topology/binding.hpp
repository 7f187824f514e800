// Applying a placement on this machine: thread binding to an actor's hardware threads
// and host memory bound to a NUMA node, each checked by asking hwloc where the thread
// ran and where the pages lie. On a recorded topology (not this system) nothing binds.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "topology/hwloc_topology.hpp"
#include "topology/placement.hpp"

namespace vc {

/// Binds the calling thread to `pus` (OS indexes). Returns "" or why it did not bind.
[[nodiscard]] std::string bind_this_thread(const HwlocTopology& topo, const std::vector<unsigned>& pus);

/// Binds host memory [p, p + bytes) that is not yet touched (page-aligned) to NUMA
/// node `numa_os_index` (hwloc_set_area_membind, BIND): its pages land there when
/// first written. Returns "" or why it did not bind (a recorded topology, no such
/// node, hwloc's refusal).
[[nodiscard]] std::string bind_area(const HwlocTopology& topo, void* p, size_t bytes,
                                    unsigned numa_os_index);
/// The NUMA nodes (OS indexes) hwloc reports the touched pages of [p, p + bytes) on.
[[nodiscard]] std::vector<unsigned> area_nodes(const HwlocTopology& topo, const void* p, size_t bytes);

/// Host memory bound to one NUMA node (hwloc_alloc_membind, BIND policy). The
/// full tier's shard of a rank lives in one.
class NumaBuffer {
 public:
  /// Throws vc::Error when the topology is not this system or hwloc cannot bind.
  NumaBuffer(const HwlocTopology& topo, size_t bytes, unsigned numa_os_index);
  ~NumaBuffer();
  NumaBuffer(const NumaBuffer&) = delete;
  NumaBuffer& operator=(const NumaBuffer&) = delete;
  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] size_t size() const { return bytes_; }
  /// The NUMA nodes (OS indexes) hwloc reports the touched pages on.
  [[nodiscard]] std::vector<unsigned> nodes() const;

 private:
  hwloc_topology_t topo_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

/// What applying a placement did, one line per actor and shard.
struct AppliedPlace {
  std::string what;    // "drafter rank 0", "shard rank 0"
  bool applied = false;
  std::string detail;  // "ran on PU 1" / "pages on node P#0" / why not
};

/// Starts one thread per actor, binds it to the actor's PUs and records where it
/// ran; allocates `shard_probe_bytes` per shard on its NUMA node and records where
/// the pages lie. On a topology that is not this system, reports that nothing binds.
[[nodiscard]] std::vector<AppliedPlace> apply_placement(const HwlocTopology& topo, const Placement& p,
                                                         size_t shard_probe_bytes = 1 << 20);

}  // namespace vc

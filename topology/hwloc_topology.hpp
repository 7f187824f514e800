// hwloc, live or from a recorded XML, read into a plain `Topology`. Debian's hwloc
// has no CUDA/NVML plugin: GPUs are the PCI devices of vendor 0x10de and class 03xx,
// named by bus id (a CUDA device maps to one by cudaDeviceGetPCIBusId). Links between
// GPUs come from NVML when libnvidia-ml.so.1 loads on this machine, else from a
// recorded "NVLinkBandwidth" distances matrix and the PCI tree.
#pragma once
#include <string>

#include <hwloc.h>

#include "topology/topology.hpp"

namespace vc {

/// Owns one loaded hwloc topology (I/O devices kept). Not copyable.
class HwlocTopology {
 public:
  /// `xml_file` empty: this machine. Throws vc::Error naming the file when hwloc
  /// cannot read it.
  explicit HwlocTopology(const std::string& xml_file = "");
  ~HwlocTopology();
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  /// True when the topology is this machine's, so binding acts.
  [[nodiscard]] bool is_this_system() const;
  [[nodiscard]] hwloc_topology_t handle() const { return topo_; }
  /// The plain view. `use_nvml`: ask NVML for NVLink pairs (only on this system).
  [[nodiscard]] Topology read(bool use_nvml = true) const;

 private:
  hwloc_topology_t topo_ = nullptr;
  std::string source_;
};

}  // namespace vc

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
  /// `xml_file` empty: this machine, or $HWLOC_XMLFILE when set (hwloc's own
  /// override, given the same checks). The file is read with a size cap and checked
  /// for its nesting depth before hwloc parses it (topology/topology_file.hpp).
  /// Throws vc::Error naming the file when it is refused or hwloc cannot read it;
  /// `what` names where the path came from ("--topology 'F'" when empty).
  explicit HwlocTopology(const std::string& xml_file = "", const std::string& what = "");
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

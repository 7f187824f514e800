// The machine as placement sees it: NUMA nodes with their cores and memory, GPUs by
// PCI bus id, NICs, and the link class between each pair of GPUs. A plain value:
// built from hwloc (topology/hwloc_topology.hpp), compared and printed freely.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vc {

/// How two GPUs reach each other, best first (nvidia-smi's NV#, PIX/PXB, PHB, NODE, SYS).
enum class LinkClass : uint8_t {
  nvlink = 0,        // NVLink or NVSwitch
  same_switch,       // below one PCIe switch (a common PCI-to-PCI bridge)
  same_host_bridge,  // below one host bridge (PCIe root complex), no common switch
  same_numa,         // different host bridges of one NUMA node / socket
  across_sockets,    // through the inter-socket link
};

/// "nvlink", "same PCIe switch", ... for reports.
[[nodiscard]] const char* link_class_name(LinkClass c);
/// "nvlink", "same_switch", ... for JSON.
[[nodiscard]] const char* link_class_key(LinkClass c);

/// One core (hwloc logical index) and its hardware threads (OS indexes, as Linux numbers them).
struct Core {
  unsigned logical = 0;
  unsigned numa = 0;          // OS index of the NUMA node holding it
  std::vector<unsigned> pus;  // OS indexes
};

struct NumaNode {
  unsigned os_index = 0;
  uint64_t memory_bytes = 0;
  std::vector<unsigned> cores;  // logical indexes of its cores
};

/// A PCI device's place: its bus id, the NUMA node(s) and cores local to it, and the
/// PCIe root it hangs under (the bus id of the host bridge's first downstream bus).
struct PciPlace {
  std::string bus_id;             // "0000:18:00.0"
  uint16_t vendor = 0, device = 0;
  uint16_t class_id = 0;          // 0x0302 3D controller, 0x0200 Ethernet, ...
  double link_gbytes_s = 0;       // PCIe link bandwidth hwloc reports (0: unknown)
  std::vector<unsigned> numa;     // local NUMA nodes (OS indexes), nearest first
  std::vector<unsigned> cores;    // logical indexes of the cores local to it
  std::string root;               // "0000:17" host bridge's downstream bus range start
  std::vector<std::string> path;  // bridges from the host bridge down ("hostbridge 0000:17", ...)
};

struct Gpu {
  PciPlace pci;
  std::string model;         // PCI or CUDA name when hwloc knows it
  uint64_t memory_bytes = 0; // CUDAGlobalMemorySize when recorded (0: unknown)
};

struct Nic {
  PciPlace pci;
  std::string name;  // OS device name (eth0, ib0, ...) or "" when hwloc saw none
};

struct Topology {
  std::string source;         // "this machine (hwloc)" or the XML file
  bool this_system = false;   // binding acts (false for a recorded XML)
  unsigned packages = 0;
  std::vector<NumaNode> numa;
  std::vector<Core> cores;    // by logical index
  std::vector<Gpu> gpus;      // in PCI bus id order
  std::vector<Nic> nics;
  std::vector<LinkClass> links;  // [gpus x gpus], diagonal nvlink
  std::string links_from;        // "NVML", "recorded NVLinkBandwidth + PCI tree", "PCI tree"

  [[nodiscard]] LinkClass link(size_t a, size_t b) const { return links[a * gpus.size() + b]; }
  /// The GPU at PCI address `bus_id` (any form canonical_bus_id reads: "0000:18:00.0",
  /// CUDA's upper case, "18:00.0"), or null.
  [[nodiscard]] const Gpu* gpu_at(std::string_view bus_id) const;
  /// The NUMA node with OS index `os` (throws vc::Error when absent).
  [[nodiscard]] const NumaNode& node(unsigned os) const;
};

/// "0-6,14,32-38": sorted indexes with runs collapsed.
[[nodiscard]] std::string format_index_list(const std::vector<unsigned>& v);

/// The bus ids' canonical form: lower case, domain included ("0000:18:00.0").
[[nodiscard]] std::string canonical_bus_id(const std::string& bus_id);

}  // namespace vc

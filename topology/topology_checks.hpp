// Checks on what a topology records, made once when it is read: a recorded XML is
// input, and a duplicated, missing or absurd value there gave a crash-free but
// silently wrong placement or plan (two GPUs at one bus id, a link of NaN GB/s
// modelled as free, a NUMA node of 16 EiB).
#pragma once
#include <cstdint>
#include <string>

#include "topology/topology.hpp"

namespace vc {

/// The fastest PCIe link a GPU may record (PCIe 6 x16 is about 128 GB/s).
inline constexpr double kMaxPciLinkGBytesS = 10000;
/// The most memory a NUMA node or a GPU may record: 1 PiB.
inline constexpr uint64_t kMaxRecordedMemoryBytes = uint64_t(1) << 50;

/// Throws vc::Error naming `t.source` and the node or GPU when two NUMA nodes share
/// an OS index, a NUMA node records more than kMaxRecordedMemoryBytes, two GPUs
/// share a bus id, a GPU has no bus id (hwloc reads a missing pci_busid as
/// 0000:00:00.0, the host bridge's address), or a GPU's PCIe link speed is not a
/// finite number from 0 (unknown) to kMaxPciLinkGBytesS.
void check_topology(const Topology& t);

/// A GPU's memory from hwloc's CUDAGlobalMemorySize (decimal KiB), in bytes.
/// Throws vc::Error naming `what` (the file and GPU) unless it is all digits, at
/// least 1 and at most kMaxRecordedMemoryBytes.
[[nodiscard]] uint64_t parse_gpu_memory_kib(const std::string& value, const std::string& what);

}  // namespace vc

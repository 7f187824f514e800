// NVLink pairs from NVML, loaded with dlopen at run time (there is no nvml.h or
// libnvidia-ml on build machines; the driver ships libnvidia-ml.so.1 where GPUs are).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace vc {

/// For GPUs named by PCI bus id: [n x n] true where NVML reports the pair's P2P
/// NVLink capability as OK. nullopt (with `why` set) when NVML cannot be loaded or
/// initialised, or does not know one of the bus ids.
[[nodiscard]] std::optional<std::vector<bool>> nvml_nvlink_pairs(
    const std::vector<std::string>& bus_ids, std::string& why);

}  // namespace vc

// Where a model's weight matrices are multiplied: the CPU (the reference) or a CUDA
// device. Parsed from `--device cpu|cuda[:N]` and EngineConfig::device.
#pragma once
#include <string>
#include <string_view>

#include "runtime/device_budget.hpp"  // DeviceMemory

namespace vc {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // the CUDA device ordinal (cuda only)
  /// "cpu" or "cuda:N".
  [[nodiscard]] std::string str() const;
  [[nodiscard]] bool is_cpu() const { return kind == Kind::cpu; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// "cpu", "cuda" (device 0) or "cuda:N" (N a non-negative integer); anything else
/// throws vc::Error naming the text and what is accepted.
[[nodiscard]] Device parse_device(std::string_view text);

/// The PCI address of CUDA device `index` as the CUDA runtime writes it
/// ("0000:18:00.0"), or "" when this build has no CUDA or the device cannot say.
[[nodiscard]] std::string cuda_pci_bus_id(int index);

/// CUDA device `index`'s memory bandwidth in bytes/s, bytes read plus bytes written
/// by device-to-device copies of 256 MiB (the median of 5 after a warm-up): the HBM
/// roofline's rate. 0 when this build has no CUDA or the device cannot be used.
[[nodiscard]] double cuda_copy_bandwidth(int index);

/// CUDA device `index`'s free and total memory now (cudaMemGetInfo). Throws
/// vc::Error naming the device when this build has no CUDA or the device cannot say.
[[nodiscard]] DeviceMemory cuda_memory(int index);

}  // namespace vc

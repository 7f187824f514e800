// The fast-memory budget of a model on a GPU when none is given: on a GPU, fast
// memory is the device's own (HBM), so the KV budget (views, tails, full-mode
// blocks, staging; kvtiers/fast_memory.hpp) comes from what the device has free
// once the model's weights are on it, as vLLM's gpu_memory_utilization sizes its
// KV cache.
#pragma once
#include <cstddef>
#include <string>

namespace vc {

/// A device's memory at one moment (cudaMemGetInfo).
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};

/// The KV budget when `utilization` (0 < u <= 1) of the device's total memory may
/// be this process's: half of u * total less what is in use already (total - free:
/// the weights just copied, other processes), the other half for the device's
/// copies of what the budget charges (the cache's copy grows by reallocation,
/// holding old and new at once; views have copies of their own) and the rest of
/// the device for the passes' own buffers (activations, cuBLASLt's workspace, the
/// verify ring). While the host
/// keeps its own copy of what the budget covers (the paged cache and the views;
/// the device holds copies of them), the budget is also at most half of
/// `host_available` (0: not known), leaving the rest for the full tier. Throws
/// vc::Error naming `device` and the figures when that leaves nothing, or when
/// `utilization` is out of range.
[[nodiscard]] size_t device_kv_budget(const DeviceMemory& memory, double utilization,
                                      const std::string& device, size_t host_available = 0);

/// The host memory available to new allocations now: /proc/meminfo's MemAvailable,
/// or less under a container's memory limit (cgroup v2 memory.max less
/// memory.current); 0 when neither can be read.
[[nodiscard]] size_t host_available_memory();

/// The default of --gpu-memory-utilization and EngineConfig::gpu_memory_utilization.
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;

}  // namespace vc

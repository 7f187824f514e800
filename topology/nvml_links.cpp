// NVML through dlopen: only the five entry points NVLink detection needs, declared
// here with NVML's documented C signatures (nvml.h is not installed).
#include "topology/nvml_links.hpp"

#include <dlfcn.h>

namespace vc {

namespace {

using nvml_return = int;        // nvmlReturn_t; NVML_SUCCESS = 0
using nvml_device = void*;      // nvmlDevice_t (opaque)
constexpr int kP2pCapsNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kP2pStatusOk = 0;    // NVML_P2P_STATUS_OK

struct Nvml {
  void* lib = nullptr;
  nvml_return (*init)() = nullptr;
  nvml_return (*shutdown)() = nullptr;
  nvml_return (*by_bus_id)(const char*, nvml_device*) = nullptr;
  nvml_return (*p2p_status)(nvml_device, nvml_device, int, int*) = nullptr;
  ~Nvml() {
    if (lib != nullptr) dlclose(lib);
  }
};

template <class F>
bool bind(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

}  // namespace

std::optional<std::vector<bool>> nvml_nvlink_pairs(const std::vector<std::string>& bus_ids,
                                                   std::string& why) {
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n.lib == nullptr) {
    why = "libnvidia-ml.so.1 not loadable";
    return std::nullopt;
  }
  if (!bind(n.lib, "nvmlInit_v2", n.init) || !bind(n.lib, "nvmlShutdown", n.shutdown) ||
      !bind(n.lib, "nvmlDeviceGetHandleByPciBusId_v2", n.by_bus_id) ||
      !bind(n.lib, "nvmlDeviceGetP2PStatus", n.p2p_status)) {
    why = "libnvidia-ml.so.1 lacks an NVML entry point";
    return std::nullopt;
  }
  if (n.init() != 0) {
    why = "nvmlInit_v2 failed";
    return std::nullopt;
  }
  const size_t g = bus_ids.size();
  std::vector<nvml_device> dev(g, nullptr);
  std::optional<std::vector<bool>> pairs;
  bool ok = true;
  for (size_t i = 0; i < g && ok; ++i) {
    if (n.by_bus_id(bus_ids[i].c_str(), &dev[i]) != 0) {
      why = "NVML does not know GPU " + bus_ids[i];
      ok = false;
    }
  }
  if (ok) {
    pairs.emplace(g * g, false);
    for (size_t i = 0; i < g; ++i) {
      for (size_t j = 0; j < g; ++j) {
        int status = -1;
        if (i == j) (*pairs)[i * g + j] = true;
        else if (n.p2p_status(dev[i], dev[j], kP2pCapsNvlink, &status) == 0)
          (*pairs)[i * g + j] = status == kP2pStatusOk;
      }
    }
  }
  n.shutdown();
  return pairs;
}

}  // namespace vc

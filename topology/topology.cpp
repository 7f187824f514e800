// Names of link classes and small lookups of the plain topology.
#include "topology/topology.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "kernels/error.hpp"

namespace vc {

const char* link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::nvlink: return "NVLink";
    case LinkClass::same_switch: return "same PCIe switch";
    case LinkClass::same_host_bridge: return "same host bridge";
    case LinkClass::same_numa: return "same NUMA node, different host bridges";
    case LinkClass::across_sockets: return "across sockets";
  }
  return "?";
}

const char* link_class_key(LinkClass c) {
  switch (c) {
    case LinkClass::nvlink: return "nvlink";
    case LinkClass::same_switch: return "same_switch";
    case LinkClass::same_host_bridge: return "same_host_bridge";
    case LinkClass::same_numa: return "same_numa";
    case LinkClass::across_sockets: return "across_sockets";
  }
  return "?";
}

const NumaNode& Topology::node(unsigned os) const {
  for (const auto& n : numa)
    if (n.os_index == os) return n;
  throw Error("topology " + source + ": no NUMA node P#" + std::to_string(os));
}

std::string format_index_list(const std::vector<unsigned>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    size_t j = i;  // runs a-b: 0-15
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(v[i]));
    if (j > i) {
      s.push_back('-');
      s.append(std::to_string(v[j]));
    }
    i = j;
  }
  return s;
}

std::string canonical_bus_id(const std::string& bus_id) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  std::string s = bus_id;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
    dom = 0;
    if (std::sscanf(s.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
      throw Error("PCI bus id '" + bus_id + "': expected DDDD:BB:DD.F or BB:DD.F");
  }
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return out;
}

const Gpu* Topology::gpu_at(std::string_view bus_id) const {
  std::string want;
  try {
    want = canonical_bus_id(std::string(bus_id));
  } catch (const Error&) {  // not a PCI address: no GPU there
    return nullptr;
  }
  for (const Gpu& g : gpus)
    if (canonical_bus_id(g.pci.bus_id) == want) return &g;
  return nullptr;
}

}  // namespace vc

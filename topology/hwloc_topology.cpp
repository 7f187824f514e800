// hwloc objects -> the plain Topology (see the header).
#include "topology/hwloc_topology.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "kernels/error.hpp"
#include "topology/nvml_links.hpp"
#include "topology/topology_checks.hpp"
#include "topology/topology_file.hpp"

namespace vc {

namespace {

constexpr uint16_t kNvidia = 0x10de;

std::string bus_id_of(const hwloc_obj_t pci) {
  char s[32];
  const auto& p = pci->attr->pcidev;
  std::snprintf(s, sizeof s, "%04x:%02x:%02x.%x", unsigned(p.domain), unsigned(p.bus),
                unsigned(p.dev), unsigned(p.func));
  return s;
}

bool is_host_bridge(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

std::string host_bridge_name(hwloc_obj_t o) {
  char s[32];
  const auto& d = o->attr->bridge.downstream.pci;
  std::snprintf(s, sizeof s, "%04x:%02x", unsigned(d.domain), unsigned(d.secondary_bus));
  return s;
}

std::vector<unsigned> bitmap_indexes(hwloc_const_bitmap_t b) {
  std::vector<unsigned> out;
  if (b == nullptr) return out;
  int i = -1;
  while ((i = hwloc_bitmap_next(b, i)) >= 0) out.push_back(unsigned(i));
  return out;
}

// The cores whose threads all lie in `cpuset` (logical indexes).
std::vector<unsigned> cores_in(hwloc_topology_t t, hwloc_const_cpuset_t cpuset) {
  std::vector<unsigned> out;
  hwloc_obj_t c = nullptr;
  while ((c = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, c)) != nullptr)
    if (hwloc_bitmap_isincluded(c->cpuset, cpuset)) out.push_back(c->logical_index);
  return out;
}

PciPlace place_of(hwloc_topology_t t, hwloc_obj_t pci) {
  PciPlace p;
  p.bus_id = bus_id_of(pci);
  p.vendor = pci->attr->pcidev.vendor_id;
  p.device = pci->attr->pcidev.device_id;
  p.class_id = pci->attr->pcidev.class_id;
  p.link_gbytes_s = pci->attr->pcidev.linkspeed;
  for (hwloc_obj_t o = pci->parent; o != nullptr && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
    if (is_host_bridge(o)) {
      p.root = host_bridge_name(o);
      p.path.insert(p.path.begin(), "host bridge " + p.root);
    } else {
      p.path.insert(p.path.begin(), "bridge " + bus_id_of(o));
    }
  }
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, pci);
  if (anc == nullptr) return p;
  p.cores = cores_in(t, anc->cpuset);
  hwloc_location loc{};
  loc.type = HWLOC_LOCATION_TYPE_OBJECT;
  loc.location.object = anc;
  hwloc_obj_t nodes[64];
  unsigned nr = 64;
  if (hwloc_get_local_numanode_objs(t, &loc, &nr, nodes, 0) == 0 && nr == 0) {
    nr = 64;  // nothing with exactly this locality: take the nodes that cover it
    (void)hwloc_get_local_numanode_objs(t, &loc, &nr, nodes, HWLOC_LOCAL_NUMANODE_FLAG_LARGER_LOCALITY);
  }
  for (unsigned i = 0; i < std::min(nr, 64u); ++i) p.numa.push_back(nodes[i]->os_index);
  return p;
}

const char* info(hwloc_obj_t o, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(o, name);
  return v == nullptr ? "" : v;
}

// The GPU's model and memory from the OS devices under it (the CUDA/NVML plugins'
// records in an XML), else the PCI name hwloc knows.
void describe_gpu(hwloc_obj_t pci, Gpu& g, const std::string& source) {
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
    if (g.model.empty()) g.model = info(c, "GPUModel");
    if (const char* kib = hwloc_obj_get_info_by_name(c, "CUDAGlobalMemorySize"))
      g.memory_bytes = parse_gpu_memory_kib(kib, "topology " + source + ": GPU " + g.pci.bus_id);
  }
  if (g.model.empty()) g.model = info(pci, "PCIDevice");
}

std::string nic_name(hwloc_obj_t pci) {
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE && c->name != nullptr) return c->name;
  return "";
}

// The PCI device an OS device hangs under (nullptr if none).
hwloc_obj_t pci_parent(hwloc_obj_t o) {
  while (o != nullptr && o->type != HWLOC_OBJ_PCI_DEVICE) o = o->parent;
  return o;
}

LinkClass pci_link(hwloc_obj_t a, hwloc_obj_t b, const PciPlace& pa, const PciPlace& pb) {
  std::vector<hwloc_obj_t> up;
  for (hwloc_obj_t o = a->parent; o != nullptr; o = o->parent) up.push_back(o);
  for (hwloc_obj_t o = b->parent; o != nullptr; o = o->parent) {
    if (std::find(up.begin(), up.end(), o) == up.end()) continue;
    if (o->type == HWLOC_OBJ_BRIDGE)
      return is_host_bridge(o) ? LinkClass::same_host_bridge : LinkClass::same_switch;
    break;  // the first common ancestor is not of the PCI tree
  }
  for (unsigned n : pa.numa)
    if (std::find(pb.numa.begin(), pb.numa.end(), n) != pb.numa.end()) return LinkClass::same_numa;
  return LinkClass::across_sockets;
}

}  // namespace

HwlocTopology::HwlocTopology(const std::string& xml_file, const std::string& origin) {
  // hwloc itself would load $HWLOC_XMLFILE when no file is given (unless one of the
  // sources it prefers is set): it goes through the same checks, read here like
  // --topology.
  const char* env = std::getenv("HWLOC_XMLFILE");
  for (const char* preferred : {"HWLOC_FSROOT", "HWLOC_CPUID_PATH", "HWLOC_SYNTHETIC"})
    if (const char* v = std::getenv(preferred); v != nullptr && *v != '\0') env = nullptr;
  std::string what = origin.empty() ? "--topology '" + xml_file + "'" : origin;
  std::string file = xml_file;
  if (xml_file.empty() && env != nullptr && *env != '\0') {
    file = env;
    what = "HWLOC_XMLFILE '" + file + "'";
  }
  source_ = file.empty() ? std::string("this machine (hwloc)") : file;
  std::string xml;
  if (!file.empty()) xml = read_topology_xml(file, what);
  if (hwloc_topology_init(&topo_) != 0) throw Error("hwloc: topology init failed");
  bool ok = true;
  // hwloc wants the buffer's length with its terminating NUL.
  if (!file.empty()) ok = hwloc_topology_set_xmlbuffer(topo_, xml.c_str(), int(xml.size() + 1)) == 0;
  ok = ok && hwloc_topology_set_io_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == 0;
  ok = ok && hwloc_topology_load(topo_) == 0;
  if (!ok) {
    hwloc_topology_destroy(topo_);
    topo_ = nullptr;
    throw Error("topology '" + source_ + "': hwloc cannot load it (not an hwloc 2 XML topology?)");
  }
}

HwlocTopology::~HwlocTopology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

bool HwlocTopology::is_this_system() const {
  return hwloc_topology_is_thissystem(topo_) != 0;
}

Topology HwlocTopology::read(bool use_nvml) const {
  Topology t;
  t.source = source_;
  t.this_system = is_this_system();
  t.packages = unsigned(std::max(0, hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PACKAGE)));

  hwloc_obj_t o = nullptr;
  while ((o = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, o)) != nullptr) {
    NumaNode n;
    n.os_index = o->os_index;
    n.memory_bytes = o->attr->numanode.local_memory;
    t.numa.push_back(n);
  }
  while ((o = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_CORE, o)) != nullptr) {
    Core c;
    c.logical = o->logical_index;
    c.pus = bitmap_indexes(o->cpuset);
    const auto nodes = bitmap_indexes(o->nodeset);
    c.numa = nodes.empty() ? 0 : nodes.front();
    for (auto& n : t.numa)
      if (n.os_index == c.numa) n.cores.push_back(c.logical);
    t.cores.push_back(std::move(c));
  }
  if (t.cores.empty()) throw Error("topology '" + source_ + "': hwloc reports no cores");

  std::vector<hwloc_obj_t> gpu_objs;
  for (o = nullptr; (o = hwloc_get_next_pcidev(topo_, o)) != nullptr;) {
    const unsigned cls = o->attr->pcidev.class_id;
    if (o->attr->pcidev.vendor_id == kNvidia && (cls >> 8) == 0x03) {
      Gpu g;
      g.pci = place_of(topo_, o);
      describe_gpu(o, g, source_);
      t.gpus.push_back(std::move(g));
      gpu_objs.push_back(o);
    } else if ((cls >> 8) == 0x02) {
      t.nics.push_back(Nic{place_of(topo_, o), nic_name(o)});
    }
  }

  check_topology(t);

  const size_t g = t.gpus.size();
  t.links.assign(g * g, LinkClass::nvlink);
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < g; ++j)
      if (i != j) t.links[i * g + j] = pci_link(gpu_objs[i], gpu_objs[j], t.gpus[i].pci, t.gpus[j].pci);
  t.links_from = "PCI tree";
  if (g < 2) return t;

  auto set_nvlink = [&](size_t i, size_t j) {
    t.links[i * g + j] = LinkClass::nvlink;
    t.links[j * g + i] = LinkClass::nvlink;
  };
  std::string why;
  std::vector<std::string> ids;
  for (const auto& gpu : t.gpus) ids.push_back(gpu.pci.bus_id);
  if (use_nvml && t.this_system) {
    if (auto pairs = nvml_nvlink_pairs(ids, why)) {
      for (size_t i = 0; i < g; ++i)
        for (size_t j = 0; j < g; ++j)
          if (i != j && (*pairs)[i * g + j]) set_nvlink(i, j);
      t.links_from = "NVML + PCI tree";
      return t;
    }
  }
  // A recorded NVLinkBandwidth matrix (what hwloc's NVML plugin writes), between OS devices.
  // hwloc fills at most `nr` (1) matrices and sets `nr` to how many there are: a
  // file recording the matrix twice gives the first.
  hwloc_distances_s* d = nullptr;
  unsigned nr = 1;
  if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, &d, 0) == 0 && nr >= 1 && d != nullptr) {
    std::vector<int> index(d->nbobjs, -1);
    for (unsigned k = 0; k < d->nbobjs; ++k) {
      const hwloc_obj_t p = pci_parent(d->objs[k]);
      for (size_t i = 0; i < g && p != nullptr; ++i)
        if (gpu_objs[i] == p) index[k] = int(i);
    }
    for (unsigned a = 0; a < d->nbobjs; ++a)
      for (unsigned b = 0; b < d->nbobjs; ++b)
        if (a != b && index[a] >= 0 && index[b] >= 0 && d->values[a * d->nbobjs + b] > 0)
          set_nvlink(size_t(index[a]), size_t(index[b]));
    hwloc_distances_release(topo_, d);
    t.links_from = "recorded NVLinkBandwidth + PCI tree";
  }
  return t;
}

}  // namespace vc

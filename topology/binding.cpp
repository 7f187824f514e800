// hwloc thread and memory binding, verified by reading back (see the header).
#include "topology/binding.hpp"

#include <cstring>
#include <thread>

#include "kernels/error.hpp"
#include "topology/hwloc_bitmap.hpp"

namespace vc {

std::string bind_this_thread(const HwlocTopology& topo, const std::vector<unsigned>& pus) {
  if (!topo.is_this_system()) return "not this machine's topology";
  HwlocBitmap set(pus);
  if (hwloc_set_cpubind(topo.handle(), set.b, HWLOC_CPUBIND_THREAD) != 0)
    return std::string("hwloc_set_cpubind: ") + std::strerror(errno);
  return "";
}

NumaBuffer::NumaBuffer(const HwlocTopology& topo, size_t bytes, unsigned numa_os_index)
    : topo_(topo.handle()), bytes_(bytes) {
  if (!topo.is_this_system()) throw Error("NUMA binding: the topology is not this machine's");
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo_, numa_os_index);
  if (node == nullptr) throw Error("NUMA binding: no NUMA node P#" + std::to_string(numa_os_index));
  data_ = hwloc_alloc_membind(topo_, bytes, node->nodeset, HWLOC_MEMBIND_BIND,
                              HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
  if (data_ == nullptr)
    throw Error("NUMA binding: cannot allocate " + std::to_string(bytes) + " bytes on node P#" +
                std::to_string(numa_os_index) + ": " + std::strerror(errno));
  std::memset(data_, 0, bytes);  // first touch: the pages now exist where they are bound
}

NumaBuffer::~NumaBuffer() {
  if (data_ != nullptr) hwloc_free(topo_, data_, bytes_);
}

namespace {

std::vector<unsigned> nodes_of(hwloc_topology_t topo, const void* p, size_t bytes) {
  HwlocBitmap set;
  if (hwloc_get_area_memlocation(topo, p, bytes, set.b, HWLOC_MEMBIND_BYNODESET) != 0) return {};
  return bitmap_indexes(set.b);
}

}  // namespace

std::vector<unsigned> area_nodes(const HwlocTopology& topo, const void* p, size_t bytes) {
  return nodes_of(topo.handle(), p, bytes);
}

std::string bind_area(const HwlocTopology& topo, void* p, size_t bytes, unsigned numa_os_index) {
  if (!topo.is_this_system()) return "not this machine's topology";
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo.handle(), numa_os_index);
  if (node == nullptr) return "no NUMA node P#" + std::to_string(numa_os_index);
  if (hwloc_set_area_membind(topo.handle(), p, bytes, node->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET) != 0)
    return "hwloc_set_area_membind to node P#" + std::to_string(numa_os_index) + ": " +
           std::strerror(errno);
  return "";
}

std::vector<unsigned> NumaBuffer::nodes() const { return nodes_of(topo_, data_, bytes_); }

std::vector<AppliedPlace> apply_placement(const HwlocTopology& topo, const Placement& p,
                                          size_t shard_probe_bytes) {
  std::vector<AppliedPlace> out;
  const bool here = topo.is_this_system();
  for (const auto& a : p.actors) {
    AppliedPlace r;
    r.what = a.actor + (a.rank >= 0 ? " rank " + std::to_string(a.rank) : "");
    if (!here) {
      r.detail = "not bound: a recorded topology, not this machine";
      out.push_back(r);
      continue;
    }
    // A thread like the actor's: bind, spin briefly, and ask hwloc where it ran.
    std::thread([&] {
      const std::string err = bind_this_thread(topo, a.pus);
      if (!err.empty()) {
        r.detail = "not bound: " + err;
        return;
      }
      volatile unsigned sink = 0;
      for (unsigned i = 0; i < 1000000; ++i) sink = sink + i;
      HwlocBitmap where;
      if (hwloc_get_last_cpu_location(topo.handle(), where.b, HWLOC_CPUBIND_THREAD) != 0) {
        r.detail = "bound; hwloc cannot say where it ran";
        r.applied = true;
        return;
      }
      HwlocBitmap allowed(a.pus);
      r.applied = hwloc_bitmap_isincluded(where.b, allowed.b) != 0;
      r.detail = "bound to PU " + index_list(a.pus) + ", ran on PU " + index_list(bitmap_indexes(where.b));
    }).join();
    out.push_back(r);
  }
  for (const auto& s : p.shards) {
    AppliedPlace r;
    r.what = "shard rank " + std::to_string(s.rank);
    if (!here) {
      r.detail = "not bound: a recorded topology, not this machine";
    } else {
      try {
        NumaBuffer b(topo, shard_probe_bytes, s.numa);
        const auto nodes = b.nodes();
        r.applied = nodes == std::vector<unsigned>{s.numa};
        r.detail = std::to_string(shard_probe_bytes >> 10) + " KiB bound to node P#" + std::to_string(s.numa) +
                   ", pages on node(s) P#" + index_list(nodes);
      } catch (const Error& e) {
        r.detail = std::string("not bound: ") + e.what();
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace vc

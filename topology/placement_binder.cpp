// Binding an engine's threads to its placement, each binding read back (see header).
#include "topology/placement_binder.hpp"

#include <cerrno>
#include <cstring>

#include "topology/hwloc_bitmap.hpp"

namespace vc {

PlacementBinder::PlacementBinder(const HwlocTopology& topo, Placement plan)
    : topo_(topo), plan_(std::move(plan)) {}

const ActorPlace* PlacementBinder::find(const std::string& actor, int rank) const {
  for (const auto& a : plan_.actors)
    if (a.actor == actor && a.rank == rank) return &a;
  return nullptr;
}

void PlacementBinder::bind_calling_thread(const std::string& actor, int rank) {
  const ActorPlace* place = find(actor, rank);
  if (place == nullptr) return record(actor, rank, "the plan has no such actor", "");
  if (!topo_.is_this_system()) return record(actor, rank, "a recorded topology, not this machine", "");
  std::string err = bind_this_thread(topo_, place->pus);
  if (err.empty()) {  // read back: the thread's binding is exactly the actor's PUs
    HwlocBitmap want(place->pus), got;
    if (hwloc_get_cpubind(topo_.handle(), got.b, HWLOC_CPUBIND_THREAD) != 0)
      err = std::string("hwloc_get_cpubind: ") + std::strerror(errno);
    else if (!hwloc_bitmap_isequal(want.b, got.b))
      err = "the binding did not read back as PU " + index_list(place->pus);
  }
  std::string memory;
  if (err.empty() && rank >= 0 && size_t(rank) < plan_.shards.size()) {
    const unsigned numa = plan_.shards[size_t(rank)].numa;
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo_.handle(), numa);
    HwlocBitmap got;
    hwloc_membind_policy_t policy{};
    if (node == nullptr) {
      err = "no NUMA node P#" + std::to_string(numa);
    } else if (hwloc_set_membind(topo_.handle(), node->nodeset, HWLOC_MEMBIND_BIND,
                                 HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
      err = "hwloc_set_membind to node P#" + std::to_string(numa) + ": " + std::strerror(errno);
    } else if (hwloc_get_membind(topo_.handle(), got.b, &policy,
                                 HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0 ||
               !hwloc_bitmap_isequal(got.b, node->nodeset) || policy != HWLOC_MEMBIND_BIND) {
      err = "the memory binding did not read back as node P#" + std::to_string(numa);
    } else {
      memory = "memory bound to node P#" + std::to_string(numa);
    }
  }
  record(actor, rank, err, memory);
}

void PlacementBinder::bind_thread(pthread_t thread, const std::string& actor, int rank) {
  const ActorPlace* place = find(actor, rank);
  if (place == nullptr) return record(actor, rank, "the plan has no such actor", "");
  if (!topo_.is_this_system()) return record(actor, rank, "a recorded topology, not this machine", "");
  HwlocBitmap want(place->pus), got;
  std::string err;
  if (hwloc_set_thread_cpubind(topo_.handle(), thread, want.b, 0) != 0)
    err = std::string("hwloc_set_thread_cpubind: ") + std::strerror(errno);
  else if (hwloc_get_thread_cpubind(topo_.handle(), thread, got.b, 0) != 0 ||
           !hwloc_bitmap_isequal(want.b, got.b))
    err = "the binding did not read back as PU " + index_list(place->pus);
  record(actor, rank, err, "");
}

void PlacementBinder::record(const std::string& actor, int rank, const std::string& error,
                             const std::string& memory) {
  std::lock_guard<std::mutex> lock(mu_);
  Tally& t = tallies_[{actor, rank}];
  ++t.threads;
  if (error.empty()) {
    ++t.ok;
  } else if (t.failure.empty()) {
    t.failure = error;
  }
  if (!memory.empty()) t.memory = memory;
}

std::vector<AppliedPlace> PlacementBinder::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AppliedPlace> out;
  for (const auto& a : plan_.actors) {
    const auto it = tallies_.find({a.actor, a.rank});
    if (it == tallies_.end()) continue;
    const Tally& t = it->second;
    AppliedPlace r;
    r.what = a.actor + (a.rank >= 0 ? " rank " + std::to_string(a.rank) : "");
    r.applied = t.ok == t.threads;
    const std::string n = std::to_string(t.threads) + (t.threads == 1 ? " thread" : " threads");
    r.detail = r.applied ? n + " bound to PU " + index_list(a.pus) + (t.memory.empty() ? "" : ", " + t.memory)
                         : std::to_string(t.threads - t.ok) + " of " + n + " not bound: " + t.failure;
    out.push_back(std::move(r));
  }
  for (const auto& [key, t] : tallies_)  // asked for an actor the plan lacks
    if (find(key.first, key.second) == nullptr)
      out.push_back({key.first + (key.second >= 0 ? " rank " + std::to_string(key.second) : ""), false,
                     "not bound: " + t.failure});
  return out;
}

}  // namespace vc

// A placement applied to a running engine's own threads: each actor binds every
// thread it owns (its compute threads, its rank threads, a mover's copy threads)
// through one binder, which checks each binding by reading it back and reports one
// line per actor and rank.
#pragma once
#include <map>
#include <mutex>
#include <pthread.h>
#include <string>
#include <utility>
#include <vector>

#include "topology/binding.hpp"

namespace vc {

class PlacementBinder {
 public:
  /// `topo` must outlive the binder. On a topology that is not this system every
  /// bind reports "not bound" and changes nothing.
  PlacementBinder(const HwlocTopology& topo, Placement plan);

  [[nodiscard]] const Placement& plan() const { return plan_; }

  /// Binds the calling thread to the PUs of `actor` of `rank` (Placement::actor;
  /// the fetcher is rank -1) and, for a rank's drafter, verifier and mover, its
  /// memory to the NUMA node of the rank's shard (the thread's later allocations
  /// land there). Thread-safe; never throws (a failure is reported).
  void bind_calling_thread(const std::string& actor, int rank);
  /// Binds another thread's CPUs (hwloc cannot bind another thread's memory; a
  /// copy thread allocates nothing).
  void bind_thread(pthread_t thread, const std::string& actor, int rank);

  /// One line per actor and rank, in plan order: how many threads were bound,
  /// where, and whether every binding read back as asked. Actors none of whose
  /// threads asked (a fetcher without a remote store) are left out; actors the
  /// plan lacks come last, not bound.
  [[nodiscard]] std::vector<AppliedPlace> report() const;

 private:
  struct Tally {
    size_t threads = 0, ok = 0;
    std::string failure;  // the first thread's failure
    std::string memory;   // "memory on node P#0" once read back
  };
  void record(const std::string& actor, int rank, const std::string& error, const std::string& memory);
  [[nodiscard]] const ActorPlace* find(const std::string& actor, int rank) const;

  const HwlocTopology& topo_;
  Placement plan_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, Tally> tallies_;
};

}  // namespace vc

// One operation on every rank of a tensor-parallel group at once: the building
// block of the engine's rank groups (tp_draft_batcher, tp_verifier).
#pragma once
#include <functional>
#include <memory>

#include "runtime/tp_comm.hpp"

namespace vc {

class RankThreads;

class RankGroup {
 public:
  /// The ranks of `comm`'s group; null: one rank, no collectives.
  explicit RankGroup(std::shared_ptr<Communicator> comm);
  ~RankGroup();
  RankGroup(RankGroup&&) noexcept;
  RankGroup& operator=(RankGroup&&) noexcept;

  [[nodiscard]] int degree() const { return comm_ ? comm_->degree() : 1; }
  [[nodiscard]] const std::shared_ptr<Communicator>& comm() const { return comm_; }

  /// Runs f(r) on every rank at once: rank 0 on the calling thread, ranks 1.. each
  /// on its own thread, started by the first run and kept (parked between runs)
  /// until the group is destroyed, so a draft step does not pay for starting
  /// threads and rank r always runs on the same thread. A rank that throws aborts
  /// the group, so no rank waits in a collective for it; once every rank has
  /// returned, the group is reset (usable again) and the first failing rank's
  /// exception is rethrown, its own message intact. Not reentrant: one operation
  /// per group at a time.
  void run(const std::function<void(int rank)>& f) const;

 private:
  std::shared_ptr<Communicator> comm_;
  mutable std::unique_ptr<RankThreads> threads_;  // ranks 1..; null until the first run
};

}  // namespace vc

// The verify pass of a tensor-parallel group: one Verifier per rank, each over its
// shard and reading its own rank's full KV through its own streamer.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "runtime/layer_streamer.hpp"
#include "runtime/rank_group.hpp"
#include "runtime/verifier.hpp"

namespace vc {

/// Rank r's streamer over rank r's full tier (the engine's mover owns them).
struct StreamerGroup {
  std::vector<std::shared_ptr<LayerStreamer>> ranks;
};
/// The verifier's lanes: requests sharing a verify pass each stream through a lane
/// of their own (one streamer per rank).
using StreamerLanes = std::vector<std::shared_ptr<StreamerGroup>>;

/// A group's verify outcome: rank 0's (the base, what the scheduler reads) and the
/// other ranks', whose verified KV rows hold their own KV heads; their tokens,
/// logprobs and acceptance equal rank 0's. TpVerifier::run makes one at every
/// degree above 1 (behind a shared_ptr<const VerifyOutcome> in the messages).
struct TpVerifyOutcome : VerifyOutcome {
  std::vector<VerifyOutcome> other_ranks;  // ranks 1 .. degree-1
};

/// Rank r's outcome of a pass of a group of `degree` ranks (rank 0, or degree 1:
/// `v` itself; otherwise `v` is a TpVerifyOutcome, as TpVerifier::run made it).
[[nodiscard]] const VerifyOutcome& rank_outcome(const VerifyOutcome& v, int r, int degree);

class TpVerifier {
 public:
  /// ranks[r] verifies with shard r of `comm`'s group (one rank: comm may be null).
  TpVerifier(std::vector<std::shared_ptr<Verifier>> ranks, std::shared_ptr<Communicator> comm);
  /// One verifier, no tensor parallelism.
  explicit TpVerifier(std::shared_ptr<Verifier> one);

  [[nodiscard]] int degree() const { return int(ranks_.size()); }
  /// Runs the pass on every rank at once (rank r reads streams.ranks[r], already
  /// started for this job). The ranks' tokens, logprobs and acceptance must agree
  /// (vc::Error otherwise); returns rank 0's outcome, a TpVerifyOutcome holding
  /// the other ranks' when degree > 1. A failing rank fails the pass with its own
  /// error and leaves the group usable.
  [[nodiscard]] std::shared_ptr<const VerifyOutcome> run(const VerifyJob& job,
                                                         const StreamerGroup& streams);
  /// Several requests' passes as one forward on every rank (Verifier::run_batch):
  /// job j reads streams[j] (its streamers, one per rank, started for it). Same
  /// checks and outcomes as run(), one per job in order.
  [[nodiscard]] std::vector<std::shared_ptr<const VerifyOutcome>> run_batch(
      std::span<const VerifyJob> jobs, std::span<const StreamerGroup* const> streams);
  /// Runs f(r, t) on every compute thread t of every rank r (the ranks at once;
  /// rank 0's thread 0 is the calling thread), for thread binding.
  void run_on_each_thread(const std::function<void(int rank, int thread)>& f);

 private:
  std::vector<std::shared_ptr<Verifier>> ranks_;
  RankGroup group_;
};

}  // namespace vc

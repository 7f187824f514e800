// The drafter of a tensor-parallel group: one DraftBatcher per rank, each over its
// shard, its rank's full tier and its rank's share of fast memory; every operation
// runs on all ranks at once and the ranks' answers are checked equal.
#pragma once
#include <memory>
#include <vector>

#include "runtime/draft_batcher.hpp"
#include "runtime/rank_group.hpp"

namespace vc {

class TpDraftBatcher {
 public:
  /// ranks[r] drafts with shard r of `comm`'s group (one rank: comm may be null).
  TpDraftBatcher(std::vector<std::shared_ptr<DraftBatcher>> ranks,
                 std::shared_ptr<Communicator> comm);
  /// One batcher, no tensor parallelism.
  explicit TpDraftBatcher(std::shared_ptr<DraftBatcher> one);

  [[nodiscard]] int degree() const { return int(ranks_.size()); }
  [[nodiscard]] DraftBatcher& rank(int r) { return *ranks_.at(size_t(r)); }

  /// As DraftBatcher, on every rank. Results are rank 0's, checked equal across
  /// ranks (tokens, logprobs); compressed_bytes and compressed_full_bytes are summed
  /// over the ranks (the whole model's view), fast_bytes_peak is the largest rank's
  /// (fast-memory budgets are per rank). A rank's failure fails the operation with
  /// its own error on every rank; nothing of a failed prefill is kept on any rank.
  [[nodiscard]] PrefillResult prefill(const DraftSpec& spec);
  /// prefill() in parts, for a caller that runs each rank's prefill on a thread of
  /// its own (the engine's sliced prefill, actors/workers.cpp): rank(r).prefill(),
  /// which meets the others in collectives, so every rank's must run at once
  /// (run_ranks); then merge_prefills() of their results, checked as prefill() does.
  /// A deferred fold (commit's defer_fold) likewise: rank(r).fold() on every rank.
  [[nodiscard]] PrefillResult merge_prefills(uint64_t id, std::vector<PrefillResult> out);
  /// Runs f(r) for every rank at once (RankGroup::run: a throwing rank aborts the
  /// others' collectives, and its own error is rethrown).
  void run_ranks(const std::function<void(int rank)>& f) { group_.run(f); }
  /// DraftBatcher::set_chunk_hook, every rank: rank r's calls hook(r).
  void set_chunk_hook(const std::function<void(int rank)>& hook);
  /// DraftBatcher::set_first_token_hook on rank 0 (every rank draws the same token).
  void set_first_token_hook(DraftBatcher::FirstTokenHook hook) {
    rank(0).set_first_token_hook(std::move(hook));
  }
  /// Called by every rank at once (in a prefill: its chunk hook): returns once all
  /// have called it, so that no rank goes on while another is still inside a
  /// collective; a rank that arrives from elsewhere (in another collective) makes
  /// that one fail on its size check instead of leaving the group waiting. Nothing
  /// at degree 1.
  void align(int rank);
  void start(uint64_t id, size_t n, bool ahead = false);  // DraftBatcher::start
  [[nodiscard]] bool busy() const { return ranks_[0]->busy(); }
  [[nodiscard]] std::vector<DraftBlock> step();
  /// Rank r commits rank_outcome(v, r, degree()): its own KV heads' verified rows
  /// (`v` is TpVerifier::run's outcome).
  void commit(uint64_t id, const VerifyOutcome& v, size_t ahead = 0, bool defer_fold = false);
  /// DraftBatcher::fold_pending (rank 0's: every rank commits alike).
  [[nodiscard]] bool fold_pending(uint64_t id) const { return ranks_[0]->fold_pending(id); }
  /// DraftBatcher::finish_prefill (compressed first) on every rank at once; the
  /// exact first token and drafts_kept checked equal across ranks.
  [[nodiscard]] PrefillResult finish_prefill(uint64_t id, size_t cached);
  /// finish_prefill() in parts, as merge_prefills() for prefill(): the ranks'
  /// rank(r).finish_prefill() results, checked and made one.
  [[nodiscard]] PrefillResult merge_finished(uint64_t id, std::vector<PrefillResult> out);
  void release(uint64_t id);
  void set_stream_final(bool on);  // DraftBatcher::set_stream_final, every rank

  [[nodiscard]] const std::vector<uint64_t>& active() const { return ranks_[0]->active(); }
  [[nodiscard]] size_t last_step_rows() const { return ranks_[0]->last_step_rows(); }
  [[nodiscard]] const std::vector<uint64_t>& last_step_ids() const { return ranks_[0]->last_step_ids(); }
  /// Summed over the ranks (thread-safe).
  [[nodiscard]] size_t prefill_bytes_streamed() const;
  /// Runs f(r, t) on every compute thread t of every rank r (the ranks at once;
  /// rank 0's thread 0 is the calling thread), for thread binding.
  void run_on_each_thread(const std::function<void(int rank, int thread)>& f);

 private:
  std::vector<std::shared_ptr<DraftBatcher>> ranks_;
  RankGroup group_;
};

}  // namespace vc

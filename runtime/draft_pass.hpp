// One pass of the compressed-KV drafter when a level above it proposes tokens: the
// rows t, g1..gk run together over the view; row i's logits give the drafter's own
// draw for the position after it (the same (seed, position) noise as a single-row
// step). The drafter keeps g(i+1) while its draw equals it, and at the first
// difference (or after gk) keeps its own draw: so a pass yields m + 1 drafts, the m
// proposals it agrees with and one of its own, exactly the tokens single-row steps
// would have drafted. With no proposal it is an ordinary single-row step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/ngram_proposer.hpp"
#include "runtime/sampler.hpp"

namespace vc {

/// What one drafter pass yields.
struct DraftPassResult {
  std::vector<int32_t> tokens;  ///< m + 1 drafts: the confirmed proposals, then the drafter's draw
  size_t proposed = 0;          ///< k
  size_t confirmed = 0;         ///< m: proposals the drafter's draws equal
};

/// The rows' tokens of a pass from pending token `t` with proposals `g`: t, g...
[[nodiscard]] std::vector<int32_t> draft_pass_rows(int32_t t, std::span<const int32_t> g);

/// Checks proposals `g` against the pass's logits ([g.size() + 1, vocab], row 0 is
/// the pending token at `position`).
[[nodiscard]] DraftPassResult check_proposals(std::span<const float> logits, size_t vocab,
                                              std::span<const int32_t> g,
                                              const SamplingParams& sampling, int64_t position);

/// Per-level counts of the draft hierarchy (DESIGN.md: three levels).
struct DraftLevelStats {
  size_t ngram_proposed = 0;   ///< tokens the n-gram level proposed
  size_t ngram_confirmed = 0;  ///< of them, kept by the compressed-KV drafter
  size_t ngram_accepted = 0;   ///< of those, accepted by the verifier
  size_t drafter_passes = 0;   ///< forward passes of the compressed-KV drafter
  size_t drafter_own = 0;      ///< drafts the drafter drew itself (not proposals)
  double ngram_seconds = 0;    ///< the n-gram level's cost: its context lookups

  DraftLevelStats& operator+=(const DraftLevelStats& o) {
    ngram_proposed += o.ngram_proposed;
    ngram_confirmed += o.ngram_confirmed;
    ngram_accepted += o.ngram_accepted;
    drafter_passes += o.drafter_passes;
    drafter_own += o.drafter_own;
    ngram_seconds += o.ngram_seconds;
    return *this;
  }
};

/// Proposals for the next drafter pass: none without the n-gram level; otherwise
/// propose_ngram over `context`, at most `room - 1` so that the pass never yields
/// more than `room` drafts.
[[nodiscard]] std::vector<int32_t> next_proposal(DraftHierarchy h, const NgramParams& p,
                                                 std::span<const int32_t> context, size_t room);

}  // namespace vc

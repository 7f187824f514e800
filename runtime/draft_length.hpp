// How many tokens to draft before each verification: a fixed L, or chosen per round
// (adaptive) to maximise expected emitted tokens per second from the request's
// recent acceptance and the measured costs of a draft step and of a verify pass.
#pragma once
#include <cstddef>
#include <deque>
#include <vector>

namespace vc {

/// One point of a measured row-cost curve (`vericache bench rows`): a forward pass
/// of `rows` rows at the request's context takes `seconds`.
struct RowCostPoint {
  double rows = 0, seconds = 0;
};

class DraftLengthPolicy {
 public:
  /// Always `length` drafts (0 allowed: plain verify-only decoding).
  [[nodiscard]] static DraftLengthPolicy fixed(size_t length);
  /// Chosen per round in [1, max_length].
  [[nodiscard]] static DraftLengthPolicy adaptive(size_t max_length = 64);

  [[nodiscard]] bool is_adaptive() const { return adaptive_; }
  /// Drafts for the next round, when at most `remaining` tokens may still be emitted
  /// (a round emits at most drafts + 1).
  [[nodiscard]] size_t next(size_t remaining) const;
  /// Reports a finished round: `drafted` drafts, the first `accepted` of them matched
  /// (accepted < drafted means a mismatch ended the round), and its costs.
  void observe(size_t drafted, size_t accepted, double draft_seconds, double verify_seconds);

  /// Starts the estimates from an expected per-token acceptance in (0, 1) and a
  /// draft step cost (planning, `vericache plan`); observe() then moves them as
  /// rounds are measured. Throws vc::Error outside those ranges.
  void set_prior(double acceptance, double draft_step_seconds);

  /// The measured cost of a pass of n rows (ascending rows, at least one point):
  /// the verify cost of L drafts is then curve(L + 1), linear between the points
  /// and beyond the last along its last segment, plus what the observed passes
  /// cost above the curve (streaming the full KV, hand-offs), fitted as a constant.
  /// Without a curve it is a + b * rows fitted to the observed passes alone, whose
  /// row counts cluster around the chosen length and say little about the slope.
  /// Throws vc::Error on an empty, unsorted or negative curve.
  void set_row_costs(std::vector<RowCostPoint> curve);
  /// The verify-cost estimate for a pass of `rows` rows (stats and tests).
  [[nodiscard]] double verify_seconds(double rows) const;

  /// Current estimates (for stats and tests).
  [[nodiscard]] double acceptance() const;
  [[nodiscard]] double draft_step_seconds() const { return t_draft_; }
  /// Expected emitted tokens per second with L drafts under the current estimates.
  [[nodiscard]] double expected_rate(size_t L) const;

 private:
  bool adaptive_ = false;
  size_t length_ = 8;      // fixed length, or the adaptive cap
  // Acceptance as a geometric process: matches / (matches + mismatches), decayed.
  double matches_ = 8.0, mismatches_ = 2.0;  // prior: acceptance 0.8, weight 10
  double t_draft_ = 0;     // seconds per draft step (EMA)
  struct VerifySample {
    double rows, seconds;
  };
  std::deque<VerifySample> verify_;  // recent verify passes: cost = a + b * rows
  std::vector<RowCostPoint> curve_;  // measured pass cost by rows (may be empty)
  [[nodiscard]] double curve_at(double rows) const;
};

}  // namespace vc

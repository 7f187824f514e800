// How many tokens to draft before each verification: a fixed L, or chosen per round
// (adaptive) to maximise expected emitted tokens per second from the request's
// recent acceptance and the measured costs of a draft step and of a verify pass.
#pragma once
#include <cstddef>
#include <deque>

namespace vc {

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
};

}  // namespace vc

// Whether recomputing a request's front is worth what it costs the others
// (EngineConfig::remote_recompute_front_priced). Recomputing the front, the drafter
// prefills the cached prefix from the first chunk up while a net_fetcher fetches it
// from the last one down; the two meet where prefilling x positions takes as long
// as fetching the other P - x. With f and p the seconds a position takes over the
// link and in the prefill:
//   plain flow (fetch, then prefill):  the prefix is in after P f
//   recompute front:                   they meet after T = P f p / (p + f)
//   gain for this request:             P f - T = P f^2 / (p + f)
//   cost to the others:                each waits the drafter time the front takes,
//                                      about T, so `others` T in all
// Recompute when the gain exceeds the cost: f^2 > others f p, that is when fetching
// a position takes more than `others` times as long as prefilling one (P cancels).
// Alone (others = 0) that always holds. The rates are the scheduler's own
// measurements so far (FrontRates); p is an average over the prefills it has seen,
// though a position's prefill costs more at longer contexts (attention).
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace vc::actors {

/// What the scheduler has measured of its store's link and its drafter's prefill:
/// sums over plain full fetches and over local prefills without a meeting.
class FrontRates {
 public:
  /// A full fetch's run: `positions` positions arrived in `seconds`.
  void add_fetch(size_t positions, double seconds);
  /// A local prefill of `positions` positions took `seconds` (the drafter's time,
  /// other requests' steps between its slices included).
  void add_prefill(size_t positions, double seconds);
  /// Seconds per position over the link, and in the prefill; none before a sample.
  [[nodiscard]] std::optional<double> fetch_seconds_per_position() const;
  [[nodiscard]] std::optional<double> prefill_seconds_per_position() const;

 private:
  double fetch_seconds_ = 0, prefill_seconds_ = 0;
  size_t fetch_positions_ = 0, prefill_positions_ = 0;
};

/// The decision for one request and what it was made from.
struct FrontPrice {
  bool recompute = false;
  size_t others = 0;            ///< requests admitted or waiting beside it
  double fetch_per_position = 0;    ///< f (0: not measured yet)
  double prefill_per_position = 0;  ///< p (0: not measured yet)
  std::string why;              ///< one line, for the request's stats
};

/// Recompute the front of a request with `others` requests beside it?
[[nodiscard]] FrontPrice price_front(size_t others, const FrontRates& rates);

}  // namespace vc::actors

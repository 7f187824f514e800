#include "actors/front_price.hpp"

#include <cstdio>

namespace vc::actors {

void FrontRates::add_fetch(size_t positions, double seconds) {
  if (positions == 0 || !(seconds > 0)) return;
  fetch_positions_ += positions;
  fetch_seconds_ += seconds;
}

void FrontRates::add_prefill(size_t positions, double seconds) {
  if (positions == 0 || !(seconds > 0)) return;
  prefill_positions_ += positions;
  prefill_seconds_ += seconds;
}

std::optional<double> FrontRates::fetch_seconds_per_position() const {
  if (fetch_positions_ == 0) return std::nullopt;
  return fetch_seconds_ / double(fetch_positions_);
}

std::optional<double> FrontRates::prefill_seconds_per_position() const {
  if (prefill_positions_ == 0) return std::nullopt;
  return prefill_seconds_ / double(prefill_positions_);
}

FrontPrice price_front(size_t others, const FrontRates& rates) {
  FrontPrice d;
  d.others = others;
  const auto f = rates.fetch_seconds_per_position();
  const auto p = rates.prefill_seconds_per_position();
  d.fetch_per_position = f.value_or(0);
  d.prefill_per_position = p.value_or(0);
  char line[200];
  if (others == 0) {
    d.recompute = true;
    d.why = "alone: nothing to delay";
    return d;
  }
  if (!f || !p) {
    d.why = std::string("beside ") + std::to_string(others) + " other(s), no " +
            (!f ? "fetch" : "prefill") + " measured yet: fetch, then prefill";
    return d;
  }
  d.recompute = *f > double(others) * *p;
  std::snprintf(line, sizeof line,
                "beside %zu other(s): a position takes %.3g ms to fetch, %.3g ms to prefill; %s",
                others, *f * 1e3, *p * 1e3,
                d.recompute ? "fetch > others x prefill: recompute the front"
                            : "fetch <= others x prefill: fetch, then prefill");
  d.why = line;
  return d;
}

}  // namespace vc::actors

// Draft-length choice: E[tokens | L] = (1 - a^(L+1)) / (1 - a) for per-token
// acceptance a; cost(L) = L * t_draft + t_verify(L + 1 rows), t_verify the measured
// row-cost curve plus a fitted constant, or, without a curve, a + b * rows fitted by
// least squares over recent passes.
#include "runtime/draft_length.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/error.hpp"

namespace vc {

DraftLengthPolicy DraftLengthPolicy::fixed(size_t length) {
  DraftLengthPolicy p;
  p.length_ = length;
  return p;
}

DraftLengthPolicy DraftLengthPolicy::adaptive(size_t max_length) {
  DraftLengthPolicy p;
  p.adaptive_ = true;
  p.length_ = std::max<size_t>(1, max_length);
  return p;
}

double DraftLengthPolicy::acceptance() const {
  return std::clamp(matches_ / (matches_ + mismatches_), 0.0, 0.999);
}

void DraftLengthPolicy::set_prior(double acceptance, double draft_step_seconds) {
  if (!(acceptance > 0 && acceptance < 1))
    throw Error("draft length: acceptance must be in (0, 1), got " + std::to_string(acceptance));
  if (!(draft_step_seconds >= 0) || !std::isfinite(draft_step_seconds))
    throw Error("draft length: draft step seconds must be >= 0");
  constexpr double kWeight = 10.0;  // as much weight as the built-in prior
  matches_ = kWeight * acceptance;
  mismatches_ = kWeight * (1.0 - acceptance);
  t_draft_ = draft_step_seconds;
}

void DraftLengthPolicy::set_row_costs(std::vector<RowCostPoint> curve) {
  if (curve.empty()) throw Error("draft length: the row-cost curve has no points");
  for (size_t i = 0; i < curve.size(); ++i) {
    const RowCostPoint& p = curve[i];
    if (!(p.rows >= 1) || !(p.seconds >= 0) || !std::isfinite(p.rows) || !std::isfinite(p.seconds))
      throw Error("draft length: row-cost point " + std::to_string(i) +
                  " needs rows >= 1 and seconds >= 0");
    if (i > 0 && !(p.rows > curve[i - 1].rows))
      throw Error("draft length: the row-cost curve's rows must ascend (point " +
                  std::to_string(i) + ")");
  }
  curve_ = std::move(curve);
}

double DraftLengthPolicy::curve_at(double rows) const {
  const auto& c = curve_;
  if (c.size() == 1) return c[0].seconds * rows / c[0].rows;
  size_t i = 1;  // the segment [i - 1, i] that holds rows, or the nearest end one
  while (i + 1 < c.size() && rows > c[i].rows) ++i;
  const double slope = (c[i].seconds - c[i - 1].seconds) / (c[i].rows - c[i - 1].rows);
  return std::max(0.0, c[i - 1].seconds + slope * (rows - c[i - 1].rows));
}

double DraftLengthPolicy::verify_seconds(double rows) const {
  const size_t n = verify_.size();
  if (!curve_.empty()) {
    double above = 0;  // what passes cost beyond the curve, on average
    for (const auto& s : verify_) above += s.seconds - curve_at(s.rows);
    return curve_at(rows) + (n > 0 ? std::max(0.0, above / double(n)) : 0.0);
  }
  if (n == 0) return t_draft_ > 0 ? 2 * t_draft_ : 1.0;  // no measurement yet: a guess
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& s : verify_) {
    sx += s.rows;
    sy += s.seconds;
    sxx += s.rows * s.rows;
    sxy += s.rows * s.seconds;
  }
  const double den = double(n) * sxx - sx * sx;
  if (n >= 2 && den > 1e-12) {
    const double b = std::max(0.0, (double(n) * sxy - sx * sy) / den);
    return std::max(0.0, (sy - b * sx) / double(n)) + b * rows;
  }
  return sy / double(n);
}

double DraftLengthPolicy::expected_rate(size_t L) const {
  const double a = acceptance();
  const double tokens = (1.0 - std::pow(a, double(L + 1))) / (1.0 - a);
  const double cost = double(L) * t_draft_ + verify_seconds(double(L + 1));
  return cost > 0 ? tokens / cost : tokens;
}

size_t DraftLengthPolicy::next(size_t remaining) const {
  const size_t cap = remaining > 0 ? remaining - 1 : 0;
  if (!adaptive_) return std::min(length_, cap);
  if (t_draft_ <= 0) return std::min<size_t>(std::min<size_t>(8, length_), cap);  // warm-up
  size_t best = 1;
  double best_rate = -1;
  for (size_t L = 1; L <= length_; ++L) {
    const double r = expected_rate(L);
    if (r > best_rate) {
      best_rate = r;
      best = L;
    }
  }
  return std::min(best, cap);
}

void DraftLengthPolicy::observe(size_t drafted, size_t accepted, double draft_seconds,
                                double verify_seconds) {
  constexpr double kDecay = 0.9;  // recent rounds weigh more: prompts change phase
  matches_ = matches_ * kDecay + double(accepted);
  mismatches_ = mismatches_ * kDecay + (accepted < drafted ? 1.0 : 0.0);
  if (drafted > 0) {
    const double step = draft_seconds / double(drafted);
    t_draft_ = t_draft_ <= 0 ? step : 0.8 * t_draft_ + 0.2 * step;
  }
  verify_.push_back({double(drafted + 1), verify_seconds});
  if (verify_.size() > 16) verify_.pop_front();
}

}  // namespace vc

// Draft-length choice: E[tokens | L] = (1 - a^(L+1)) / (1 - a) for per-token
// acceptance a; cost(L) = L * t_draft + t_verify(L + 1 rows), t_verify fitted as
// a + b * rows by least squares over recent passes.
#include "runtime/draft_length.hpp"

#include <algorithm>
#include <cmath>

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

double DraftLengthPolicy::expected_rate(size_t L) const {
  const double a = acceptance();
  const double tokens = (1.0 - std::pow(a, double(L + 1))) / (1.0 - a);
  double va = 0, vb = 0;  // verify cost = va + vb * rows
  const size_t n = verify_.size();
  if (n == 0) {
    va = t_draft_ > 0 ? 2 * t_draft_ : 1.0;  // no measurement yet: a guess
  } else {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& s : verify_) {
      sx += s.rows;
      sy += s.seconds;
      sxx += s.rows * s.rows;
      sxy += s.rows * s.seconds;
    }
    const double den = double(n) * sxx - sx * sx;
    if (n >= 2 && den > 1e-12) {
      vb = std::max(0.0, (double(n) * sxy - sx * sy) / den);
      va = std::max(0.0, (sy - vb * sx) / double(n));
    } else {
      va = sy / double(n);
    }
  }
  const double cost = double(L) * t_draft_ + va + vb * double(L + 1);
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

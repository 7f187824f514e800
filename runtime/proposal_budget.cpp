#include "runtime/proposal_budget.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace vc {

void PassCostCurve::observe(size_t rows, double seconds) {
  if (rows == 0) throw Error("PassCostCurve::observe: a pass has at least one row");
  if (!(seconds >= 0)) return;  // a clock that went backwards, or NaN: not a sample
  if (mean_.size() <= rows) mean_.resize(rows + 1, -1.0);
  double& m = mean_[rows];
  if (m < 0) {
    m = seconds;
    ++measured_;
  } else {
    m += kWeight * (seconds - m);
  }
}

double PassCostCurve::cost(size_t rows) const {
  if (measured_ == 0) return 0;
  rows = std::max<size_t>(rows, 1);
  size_t lo = 0, hi = 0;  // the nearest measured counts at or below / at or above
  for (size_t n = std::min(rows, mean_.size() - 1); n >= 1; --n)
    if (mean_[n] >= 0) {
      lo = n;
      break;
    }
  for (size_t n = rows; n < mean_.size(); ++n)
    if (mean_[n] >= 0) {
      hi = n;
      break;
    }
  if (lo == rows) return mean_[lo];
  if (lo == 0) return mean_[hi];
  if (hi == 0) return mean_[lo];
  const double f = double(rows - lo) / double(hi - lo);
  return mean_[lo] + f * (mean_[hi] - mean_[lo]);
}

double confirm_rate(size_t confirmed, size_t refused) {
  return (double(confirmed) + 1.0) / (double(confirmed) + double(refused) + 2.0);
}

std::vector<size_t> keep_proposals(size_t base_rows, std::span<const ProposalOffer> offers,
                                   const PassCostCurve& curve) {
  std::vector<size_t> keep(offers.size(), 0);
  if (curve.empty()) {
    for (size_t i = 0; i < offers.size(); ++i) keep[i] = offers[i].length;
    return keep;
  }
  // The next token of each request is worth chance[i] = rate^(keep[i] + 1).
  std::vector<double> chance(offers.size());
  for (size_t i = 0; i < offers.size(); ++i) chance[i] = offers[i].rate;
  size_t rows = base_rows;
  double tokens = double(base_rows);
  for (;;) {
    size_t best = offers.size();
    for (size_t i = 0; i < offers.size(); ++i)
      if (keep[i] < offers[i].length && (best == offers.size() || chance[i] > chance[best]))
        best = i;
    if (best == offers.size()) break;
    const double now = curve.cost(rows), next = curve.cost(rows + 1);
    // (tokens + p) / next > tokens / now, without dividing by a zero cost.
    if ((tokens + chance[best]) * now <= tokens * next) break;
    tokens += chance[best];
    rows += 1;
    keep[best] += 1;
    chance[best] *= offers[best].rate;
  }
  return keep;
}

}  // namespace vc

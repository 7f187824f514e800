// How many n-gram proposal rows a batched drafter pass carries. A pass's cost grows
// with its rows: flat while reading the weights dominates (a GPU; a CPU up to a few
// rows), then about linear once the arithmetic does. A proposal token is worth the
// chance that it and every proposal token before it are confirmed; a pass that
// already carries many requests' rows on a compute-bound machine gains nothing from
// proposals that cost as much as the rows they save. The drafter keeps the proposal
// rows that raise its pass's expected tokens per second, on a curve of pass times it
// measures itself. Proposals never change the output (the drafter and the verifier
// check every token), only how many passes it takes.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

namespace vc {

/// Seconds per forward pass by row count, measured: a running mean per row count
/// (the last kWeight of each new observation).
class PassCostCurve {
 public:
  static constexpr double kWeight = 0.25;
  /// A pass of `rows` rows (>= 1) took `seconds`.
  void observe(size_t rows, double seconds);
  /// The expected seconds of a pass of `rows` rows (>= 1): measured row counts give
  /// their mean; between two measured counts, the line between them; above the
  /// largest measured count, its mean (optimistic: the drafter then tries the larger
  /// pass and measures it); below the smallest, the smallest's. 0 when nothing was
  /// measured.
  [[nodiscard]] double cost(size_t rows) const;
  [[nodiscard]] bool empty() const { return measured_ == 0; }

 private:
  std::vector<double> mean_;  // by row count; < 0: not measured
  size_t measured_ = 0;
};

/// One stepping request's proposal: its length and the chance that a proposal token
/// is confirmed given that the ones before it were (confirm_rate()).
struct ProposalOffer {
  size_t length = 0;
  double rate = 0;
};

/// A request's per-token confirmation chance from its history: proposal tokens
/// confirmed, and proposals cut short by a refused token (Laplace's rule).
[[nodiscard]] double confirm_rate(size_t confirmed, size_t refused);

/// For a pass of `base_rows` rows (one per stepping request) and the requests'
/// proposals, how many tokens of each proposal to keep: proposal tokens are taken in
/// order of their chance of counting (rate^j for a request's j-th token, so each
/// request keeps a prefix), each while it raises (base + expected confirmed) /
/// cost(rows). An empty curve keeps every proposal.
[[nodiscard]] std::vector<size_t> keep_proposals(size_t base_rows,
                                                 std::span<const ProposalOffer> offers,
                                                 const PassCostCurve& curve);

}  // namespace vc

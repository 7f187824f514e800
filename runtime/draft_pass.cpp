// The drafter's check of a proposal, shared by the single-request generator and
// the batched drafter.
#include "runtime/draft_pass.hpp"

namespace vc {

std::vector<int32_t> draft_pass_rows(int32_t t, std::span<const int32_t> g) {
  std::vector<int32_t> rows;
  rows.reserve(g.size() + 1);
  rows.push_back(t);
  rows.insert(rows.end(), g.begin(), g.end());
  return rows;
}

DraftPassResult check_proposals(std::span<const float> logits, size_t vocab,
                                std::span<const int32_t> g, const SamplingParams& sampling,
                                int64_t position) {
  DraftPassResult r;
  r.proposed = g.size();
  for (size_t i = 0; i <= g.size(); ++i) {
    const int32_t d = sample_token(logits.subspan(i * vocab, vocab), sampling, position + int64_t(i) + 1);
    r.tokens.push_back(d);
    if (i == g.size() || d != g[i]) break;
    r.confirmed += 1;
  }
  return r;
}

std::vector<int32_t> next_proposal(DraftHierarchy h, const NgramParams& p,
                                   std::span<const int32_t> context, size_t room) {
  if (h != DraftHierarchy::ngram || room <= 1) return {};
  return propose_ngram(context, p, room - 1);
}

}  // namespace vc

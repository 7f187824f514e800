// Prompt lookup: a backwards scan for the context's suffix.
#include "runtime/ngram_proposer.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace vc {

DraftHierarchy parse_draft_hierarchy(const std::string& s) {
  if (s == "none") return DraftHierarchy::none;
  if (s == "ngram") return DraftHierarchy::ngram;
  throw Error("draft hierarchy: expected 'none' or 'ngram', got '" + s + "'");
}

const char* draft_hierarchy_name(DraftHierarchy h) {
  return h == DraftHierarchy::ngram ? "ngram" : "none";
}

std::vector<int32_t> propose_ngram(std::span<const int32_t> context, const NgramParams& p,
                                   size_t limit) {
  limit = std::min(limit, p.max_proposal);
  const size_t len = context.size();
  if (limit == 0 || p.min_n == 0) return {};
  for (size_t n = std::min(p.max_n, len > 0 ? len - 1 : 0); n >= p.min_n; --n) {
    const std::span<const int32_t> suffix = context.subspan(len - n);
    // The most recent occurrence that ends before the suffix itself and is followed
    // by at least one token: start s in [0, len - n - 1], latest first.
    for (size_t s = len - n; s-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + ptrdiff_t(s))) continue;
      const size_t from = s + n, to = std::min(len, from + limit);
      return {context.begin() + ptrdiff_t(from), context.begin() + ptrdiff_t(to)};
    }
  }
  return {};
}

}  // namespace vc

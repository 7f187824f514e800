// The first level of the three-level drafter: prompt lookup. It proposes the tokens
// that followed the most recent earlier occurrence of the context's last n tokens
// (context = prompt + everything generated + the drafts so far), trying n from
// max_n down to min_n. It costs no forward pass; the compressed-KV drafter checks
// the proposal in one pass (draft_pass.hpp) and the verifier checks the result, so
// a wrong proposal costs rows of one pass, never a wrong token.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vc {

/// Which levels draft above the verifier: the compressed-KV drafter alone, or an
/// n-gram (prompt lookup) proposer in front of it.
enum class DraftHierarchy { none, ngram };

/// "none" or "ngram"; throws vc::Error otherwise.
[[nodiscard]] DraftHierarchy parse_draft_hierarchy(const std::string& s);
[[nodiscard]] const char* draft_hierarchy_name(DraftHierarchy h);

struct NgramParams {
  size_t min_n = 2;         ///< shortest suffix matched (>= 1)
  size_t max_n = 4;         ///< longest suffix matched (>= min_n)
  size_t max_proposal = 8;  ///< tokens proposed per drafter pass at most
};

/// Tokens following the most recent earlier occurrence of the last n tokens of
/// `context`, for the largest n in [min_n, max_n] that occurs; at most `limit`
/// (and at most p.max_proposal). Empty when nothing matches.
[[nodiscard]] std::vector<int32_t> propose_ngram(std::span<const int32_t> context,
                                                 const NgramParams& p, size_t limit);

}  // namespace vc

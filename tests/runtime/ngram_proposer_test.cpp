// The n-gram (prompt lookup) level and the drafter's one-pass check of its
// proposals, on hand-made contexts and logits.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/error.hpp"
#include "runtime/draft_pass.hpp"
#include "runtime/ngram_proposer.hpp"

namespace vc {
namespace {

using Ids = std::vector<int32_t>;

TEST(ngram_proposer, proposes_what_followed_the_latest_earlier_occurrence_of_the_suffix) {
  //              0  1  2  3  4  5  6  7  8  9
  const Ids ctx = {5, 6, 7, 1, 5, 6, 8, 9, 5, 6};
  // Suffix (5, 6) last occurred at 4..5, followed by 8, 9, 5, 6.
  EXPECT_EQ(propose_ngram(ctx, NgramParams{2, 2, 8}, 8), (Ids{8, 9, 5, 6}));
  EXPECT_EQ(propose_ngram(ctx, NgramParams{2, 2, 8}, 2), (Ids{8, 9}));
  EXPECT_EQ(propose_ngram(ctx, NgramParams{2, 2, 3}, 8), (Ids{8, 9, 5}));
}

TEST(ngram_proposer, prefers_the_longest_suffix_that_occurs) {

  const Ids ctx = {4, 5, 6, 1, 9, 5, 6, 2, 4, 5, 6};
  // n = 3: (4, 5, 6) at 0..2 -> 1; n = 2 alone would take (5, 6) at 5..6 -> 2.
  EXPECT_EQ(propose_ngram(ctx, NgramParams{2, 3, 1}, 4), (Ids{1}));
  EXPECT_EQ(propose_ngram(ctx, NgramParams{2, 2, 1}, 4), (Ids{2}));
}

TEST(ngram_proposer, proposes_nothing_when_no_suffix_recurs_or_nothing_may_be_proposed) {
  EXPECT_TRUE(propose_ngram(Ids{1, 2, 3, 4}, NgramParams{1, 3, 8}, 8).empty());
  EXPECT_TRUE(propose_ngram(Ids{1, 2, 1, 2}, NgramParams{2, 2, 8}, 0).empty());
  EXPECT_TRUE(propose_ngram(Ids{}, NgramParams{1, 3, 8}, 8).empty());
  EXPECT_TRUE(propose_ngram(Ids{7}, NgramParams{1, 3, 8}, 8).empty());
  // A run of one token matches itself shifted by one.
  EXPECT_EQ(propose_ngram(Ids{3, 3, 3}, NgramParams{2, 2, 8}, 8), (Ids{3}));
}

TEST(ngram_proposer, parses_the_hierarchy_names_and_rejects_others) {
  EXPECT_EQ(parse_draft_hierarchy("none"), DraftHierarchy::none);
  EXPECT_EQ(parse_draft_hierarchy("ngram"), DraftHierarchy::ngram);
  EXPECT_THROW((void)parse_draft_hierarchy("eagle"), Error);
}

// Greedy logits over a vocabulary of 10 whose argmax per row is `best`.
std::vector<float> logits_choosing(const Ids& best) {
  std::vector<float> lg(best.size() * 10, 0.0f);
  for (size_t i = 0; i < best.size(); ++i) lg[i * 10 + size_t(best[i])] = 5.0f;
  return lg;
}

TEST(draft_pass, keeps_the_agreed_prefix_of_the_proposal_and_one_draw_of_its_own) {
  const Ids g = {3, 4, 5};
  // The drafter agrees with 3 and 4, then draws 7 where 5 was proposed.
  const DraftPassResult r = check_proposals(logits_choosing({3, 4, 7, 1}), 10, g, {}, 100);
  EXPECT_EQ(r.tokens, (Ids{3, 4, 7}));
  EXPECT_EQ(r.proposed, 3u);
  EXPECT_EQ(r.confirmed, 2u);
}

TEST(draft_pass, yields_one_more_draft_than_the_proposal_when_all_of_it_is_kept) {
  const DraftPassResult r = check_proposals(logits_choosing({3, 4, 5, 6}), 10, Ids{3, 4, 5}, {}, 0);
  EXPECT_EQ(r.tokens, (Ids{3, 4, 5, 6}));
  EXPECT_EQ(r.confirmed, 3u);
}

TEST(draft_pass, without_a_proposal_is_a_single_row_step) {
  const DraftPassResult r = check_proposals(logits_choosing({8}), 10, Ids{}, {}, 0);
  EXPECT_EQ(r.tokens, (Ids{8}));
  EXPECT_EQ(r.confirmed, 0u);
  EXPECT_EQ(draft_pass_rows(2, Ids{}), (Ids{2}));
  EXPECT_EQ(draft_pass_rows(2, Ids{3, 4}), (Ids{2, 3, 4}));
}

TEST(draft_pass, proposes_at_most_room_minus_one_so_a_pass_never_overshoots_the_block) {
  const Ids ctx = {1, 2, 3, 4, 5, 6, 1, 2};
  EXPECT_EQ(next_proposal(DraftHierarchy::ngram, NgramParams{2, 2, 8}, ctx, 3), (Ids{3, 4}));
  EXPECT_TRUE(next_proposal(DraftHierarchy::ngram, NgramParams{2, 2, 8}, ctx, 1).empty());
  EXPECT_TRUE(next_proposal(DraftHierarchy::none, NgramParams{2, 2, 8}, ctx, 8).empty());
}

}  // namespace
}  // namespace vc

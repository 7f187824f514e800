// DraftBatcher's compressed-first flow: prefill over a fetched view (the suffix in
// the tail, the first token a guess, no full tier touched), one block drafted from
// the guess (and blocks further ahead of it), then finish_prefill: the exact first
// token of a local prefill, bit for bit, and the block kept only when the guess was
// that token; a commit with drafts ahead keeps them; complete chunks past the
// fetched view rebuild it over the whole prompt.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/verifier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

constexpr size_t kPrompt = 80, kCovered = 64;

std::vector<int32_t> prompt(uint32_t seed) {
  std::mt19937 rng(seed);
  const ModelConfig& c = test::tinycode()->config();
  return test::random_tokens(rng, kPrompt, c.vocab_size, c.bos_token_id);
}

// Sampled at a high temperature, so that a view's drift shows in its guesses.
const SamplingParams kSampling{1.5f, 0, 1.0f, 4242};

DraftSpec spec_of(uint64_t id, std::vector<int32_t> p) {
  DraftSpec s;
  s.sampling = kSampling;
  s.id = id;
  s.prompt = std::move(p);
  s.mode = DecodeMode::vericache;
  s.compressor = "snapkv";
  s.ratio = 4.0;
  s.max_new_tokens = 32;
  return s;
}

struct Reference {
  PrefillResult result;  // a local prefill's first token
  std::shared_ptr<const CompressedView> view;  // its view of [0, kCovered)
};

// A local prefill of `p` (its first token) and the first kCovered positions of its view.
Reference local_prefill(const std::vector<int32_t>& p) {
  HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
  DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
  DraftSpec s = spec_of(1, p);
  s.copy_view = true;
  Reference ref;
  ref.result = b.prefill(s);
  std::string why;
  auto head = ref.result.views.at(0)->slice(0, kCovered, why);
  EXPECT_TRUE(head) << why;
  ref.view = std::make_shared<const CompressedView>(std::move(*head));
  b.release(1);
  return ref;
}

struct Outcome {
  PrefillResult guess, exact;
  DraftBlock block;
};

// The flow with `view` fetched for prompt `p`: prefill over it, a block of 4 from the
// guess, then the exact prefill of the whole prompt (no chunk from a store).
Outcome compressed_first(const std::vector<int32_t>& p, std::shared_ptr<const CompressedView> view) {
  HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
  DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
  DraftSpec s = spec_of(7, p);
  s.fetched_views = {std::move(view)};
  s.tier_ready = true;
  Outcome o;
  o.guess = b.prefill(s);
  EXPECT_TRUE(o.guess.exact_pending);
  EXPECT_FALSE(tier.contains(7)) << "drafting over the view touches no full tier";
  b.start(7, 4);
  for (int guard = 0; b.busy() && guard < 100; ++guard)
    for (auto& blk : b.step()) o.block = std::move(blk);
  EXPECT_EQ(4u, o.block.tokens.size());
  EXPECT_THROW(b.start(7, 4), Error) << "one block from the guess, no more";
  tier.create(7, kPrompt + 32);  // the net_fetcher's entry: no chunk was cached
  o.exact = b.finish_prefill(7, 0);
  EXPECT_FALSE(o.exact.exact_pending);
  EXPECT_EQ(kPrompt, tier.length(7)) << "the prompt's exact KV is in the tier";
  const auto [t0, p0] = b.pending(7);
  EXPECT_EQ(kPrompt, p0);
  EXPECT_EQ(o.exact.token, t0);
  EXPECT_THROW((void)b.finish_prefill(7, 0), Error) << "only once";
  b.release(7);
  return o;
}

TEST(draft_batcher_compressed_first, the_exact_first_token_equals_a_local_prefills_and_the_guess_block_stands_when_it_was_right) {
  const auto p = prompt(3);
  const Reference ref = local_prefill(p);
  const Outcome o = compressed_first(p, ref.view);
  EXPECT_EQ(ref.result.token, o.exact.token);
  EXPECT_EQ(ref.result.logprob, o.exact.logprob) << "bit for bit";
  EXPECT_EQ(ref.result.token, o.guess.token) << "the prompt's own view guesses right here";
  EXPECT_TRUE(o.exact.drafts_kept);
}

TEST(draft_batcher_compressed_first, a_wrong_guess_drops_its_block_and_drafting_resumes_from_the_exact_token) {
  const auto p = prompt(3);
  const Reference ref = local_prefill(p);
  // Other prompts' views: the guesses are drafting noise, some of them wrong.
  size_t wrong = 0;
  for (uint32_t seed = 90; seed < 94; ++seed) {
    const Outcome o = compressed_first(p, local_prefill(prompt(seed)).view);
    EXPECT_EQ(ref.result.token, o.exact.token) << "exact whatever the view, seed " << seed;
    EXPECT_EQ(ref.result.logprob, o.exact.logprob);
    EXPECT_EQ(o.guess.token == o.exact.token, o.exact.drafts_kept) << "seed " << seed;
    wrong += o.guess.token != o.exact.token ? 1 : 0;
  }
  EXPECT_GT(wrong, 0u) << "no foreign view guessed wrong: the dropping path did not run";
}

// Drafts the blocks of `lengths` for request 7 (each after the first ahead of the last).
std::vector<int32_t> draft_blocks(DraftBatcher& b, const std::vector<size_t>& lengths) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    b.start(7, lengths[i], i > 0);
    for (int guard = 0; b.busy() && guard < 100; ++guard)
      for (auto& blk : b.step()) out.insert(out.end(), blk.tokens.begin(), blk.tokens.end());
  }
  return out;
}

TEST(draft_batcher_compressed_first, blocks_ahead_continue_the_guess_block_and_a_commit_with_drafts_ahead_rolls_nothing_back) {
  const auto p = prompt(3);
  const Reference ref = local_prefill(p);
  auto over_view = [&](DraftBatcher& b) {
    DraftSpec s = spec_of(7, p);
    s.fetched_views = {ref.view};
    s.tier_ready = true;
    (void)b.prefill(s);
  };
  std::vector<int32_t> one_block;
  {
    HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
    DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
    over_view(b);
    one_block = draft_blocks(b, {12});
  }
  HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
  DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
  over_view(b);
  EXPECT_THROW(b.start(7, 4, /*ahead=*/true), Error) << "ahead of no block from the guess";
  const std::vector<int32_t> ahead = draft_blocks(b, {4, 4, 4});
  EXPECT_EQ(one_block, ahead) << "three blocks ahead draft what one block of 12 drafts";
  EXPECT_EQ(kPrompt, b.pending(7).second) << "the round still starts at the guess";
  tier.create(7, kPrompt + 32);
  const PrefillResult exact = b.finish_prefill(7, 0);
  ASSERT_TRUE(exact.drafts_kept) << "the prompt's own view guesses right here";

  // The first round verifies 4 of the 12 against the full tier (the mover's half of
  // the commit by hand); the drafter keeps what lies past the verified positions.
  LayerStreamer stream(tier);
  Verifier verifier(test::tinycode(), 2);
  const VerifyJob job{7, exact.token, kPrompt, std::vector<int32_t>(ahead.begin(), ahead.begin() + 4), kSampling};
  stream.start(7, kPrompt, 5);
  const VerifyOutcome v = verifier.run(job, stream);
  const size_t layers = size_t(test::tinycode()->config().num_layers);
  for (size_t r = 0; r <= v.accepted; ++r)
    for (size_t l = 0; l < layers; ++l) tier.write(7, l, kPrompt + r, v.k(l, r), v.v(l, r));
  const size_t held = b.fast_bytes(7);
  const size_t past = 12 - v.accepted;  // drafts after the verified positions
  try {
    b.commit(7, v, past + 1);
    FAIL() << "accepted a count of drafts ahead that the tail does not hold";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drafts ahead past position"), std::string::npos) << e.what();
  }
  b.commit(7, v, past);
  EXPECT_EQ(held, b.fast_bytes(7)) << "nothing rolled back";
  EXPECT_EQ(std::make_pair(v.tokens.back(), kPrompt + v.accepted + 1), b.pending(7))
      << "the next round starts at the verifier's token";
  b.release(7);
}

TEST(draft_batcher_compressed_first, the_suffix_in_the_tail_does_not_make_the_first_round_a_fold) {
  // The fetched view covers 64 positions, the suffix's 16 sit in the tail: with
  // folds every 8 positions, the first round after the exact prefill must not
  // rebuild the view (it would be scored by that round's few verify rows, not the
  // prompt's window); folds count the tail from the prompt's end.
  const auto p = prompt(3);
  const Reference ref = local_prefill(p);
  HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
  DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
  DraftSpec s = spec_of(7, p);
  s.fold_every = 8;
  s.fetched_views = {ref.view};
  s.tier_ready = true;
  (void)b.prefill(s);
  tier.create(7, kPrompt + 32);
  (void)b.finish_prefill(7, 0);
  b.start(7, 3);
  DraftBlock block;
  for (int guard = 0; b.busy() && guard < 100; ++guard)
    for (auto& blk : b.step()) block = std::move(blk);
  ASSERT_EQ(3u, block.tokens.size());
  EXPECT_FALSE(block.wants_stats) << "a fold due with 16 suffix positions and none decoded";
  b.release(7);
}

TEST(draft_batcher_compressed_first, complete_chunks_past_the_fetched_view_rebuild_it_as_a_local_prefill_builds_it) {
  // A view of the first 32 positions fetched, chunks of 16: the exact prefill of
  // [0, 80) (no full chunk cached here) rebuilds the view over the whole prompt, the
  // bytes of a local prefill's view, and hands a copy back to publish; the tail
  // keeps only what lies past the prompt. With the fetched view covering every
  // complete chunk, or no chunk size given, the fetched view stays.
  const auto p = prompt(3);
  const Reference ref = local_prefill(p);
  std::string why;
  auto head = ref.view->slice(0, 32, why);
  ASSERT_TRUE(head) << why;
  const auto short_view = std::make_shared<const CompressedView>(std::move(*head));
  struct Case {
    std::shared_ptr<const CompressedView> view;
    size_t chunk;
    bool rebuilt;
  };
  std::vector<size_t> tail;  // per case: the tail's bytes after finish_prefill
  for (const Case& k : {Case{short_view, 16, true}, Case{short_view, 0, false}, Case{ref.view, 32, false}}) {
    const std::string what = "covered " + std::to_string(k.view->covered()) + ", chunk " + std::to_string(k.chunk);
    HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
    DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
    DraftSpec s = spec_of(7, p);
    s.fetched_views = {k.view};
    s.tier_ready = true;
    s.publish_chunk_tokens = k.chunk;
    (void)b.prefill(s);
    tier.create(7, kPrompt + 32);
    const PrefillResult exact = b.finish_prefill(7, 0);
    EXPECT_EQ(ref.result.token, exact.token) << what;
    EXPECT_EQ(ref.result.logprob, exact.logprob) << what;
    ASSERT_EQ(k.rebuilt ? 1u : 0u, exact.views.size()) << what;
    if (k.rebuilt) {
      EXPECT_EQ(kPrompt, exact.views[0]->covered());
      EXPECT_EQ(ref.result.views.at(0)->serialize(), exact.views[0]->serialize()) << "a local prefill's view";
      EXPECT_EQ(exact.views[0]->stored_bytes(), exact.compressed_bytes) << "the drafter drafts over it";
    }
    tail.push_back(b.fast_bytes(7) - (k.rebuilt ? exact.views[0] : k.view)->held_bytes());
    b.start(7, 3);  // drafting goes on over whichever view
    DraftBlock block;
    for (int guard = 0; b.busy() && guard < 100; ++guard)
      for (auto& blk : b.step()) block = std::move(blk);
    EXPECT_EQ(3u, block.tokens.size()) << what;
    b.release(7);
  }
  EXPECT_LT(tail[0], tail[1]) << "the rebuilt view let the suffix's tail blocks go";
}

TEST(draft_batcher_compressed_first, a_fetched_view_must_leave_the_last_prompt_position_to_compute) {
  HostFullTier tier(test::tinycode()->kv_config(16, DType::bf16));
  DraftBatcher b(test::tinycode(), &tier, 4096, DType::bf16, 2);
  const auto p = prompt(3);
  DraftSpec s = spec_of(5, std::vector<int32_t>(p.begin(), p.begin() + kCovered));
  s.fetched_views = {local_prefill(p).view};  // covers the whole shorter prompt
  try {
    (void)b.prefill(s);
    FAIL() << "accepted a view covering the whole prompt";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the fetched view covers 64 positions of a 64-token prompt"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(0u, b.requests());
  EXPECT_THROW((void)b.finish_prefill(5, 0), Error) << "unknown request";
}

}  // namespace
}  // namespace vc

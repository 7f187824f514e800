// DraftBatcher on the bundled model: one batched step over every drafting request,
// drafts independent of the batch, the full tier's copy of the prompt, full-mode
// decoding equal to the Generator, commit/rollback, release, and failed prefills
// that leave nothing behind.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/generator.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/verifier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

constexpr size_t kCapacity = 8192;  // positions of the drafter's fast memory

std::unique_ptr<HostFullTier> make_tier() {
  return std::make_unique<HostFullTier>(test::tinycode()->kv_config(16, DType::bf16));
}

DraftBatcher make_batcher(FullTier* tier, size_t capacity = kCapacity) {
  return DraftBatcher(test::tinycode(), tier, capacity, DType::bf16, 2);
}

std::vector<int32_t> prompt(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  const ModelConfig& c = test::tinycode()->config();
  return test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

DraftSpec make_spec(uint64_t id, std::vector<int32_t> p, DecodeMode mode = DecodeMode::vericache,
                    const std::string& compressor = "snapkv", double ratio = 4.0) {
  DraftSpec s;
  s.id = id;
  s.prompt = std::move(p);
  s.mode = mode;
  s.compressor = compressor;
  s.ratio = ratio;
  s.max_new_tokens = 64;
  return s;
}

/// Steps until `b` is idle; returns the blocks by request.
std::map<uint64_t, DraftBlock> run_blocks(DraftBatcher& b) {
  std::map<uint64_t, DraftBlock> out;
  for (int guard = 0; b.busy() && guard < 10000; ++guard)
    for (auto& blk : b.step()) out[blk.id] = std::move(blk);
  EXPECT_FALSE(b.busy());
  return out;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

GenerateResult generate_full(std::span<const int32_t> p, size_t max_tokens,
                             const SamplingParams& sampling) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  Generator gen(test::tinycode(), test::tinycode_tokenizer(), gc);
  GenerateOptions o;
  o.mode = DecodeMode::full;
  o.max_tokens = int(max_tokens);
  o.sampling = sampling;
  o.stop_at_eos = false;
  return gen.generate(p, o);
}

TEST(draft_batcher, one_step_batches_every_drafting_request_and_drafts_equal_drafting_alone) {
  struct Req {
    DraftSpec spec;
    size_t n;
  };
  std::vector<Req> reqs;
  reqs.push_back({make_spec(1, prompt(1, 40), DecodeMode::vericache, "snapkv", 4.0), 3});
  reqs.push_back({make_spec(2, prompt(2, 77), DecodeMode::vericache, "streaming_llm", 8.0), 5});
  reqs.push_back({make_spec(3, prompt(3, 114), DecodeMode::vericache, "kivi", 4.0), 8});
  reqs.push_back({make_spec(4, prompt(4, 151), DecodeMode::lossy, "h2o", 2.0), 8});
  reqs.push_back({make_spec(5, prompt(5, 60), DecodeMode::full), 6});
  reqs[2].spec.sampling = SamplingParams{0.8f, 40, 0.95f, 99};

  auto tier = make_tier();
  auto batched = make_batcher(tier.get());
  std::map<uint64_t, size_t> left;
  for (const auto& r : reqs) {
    (void)batched.prefill(r.spec);
    batched.start(r.spec.id, r.n);
    left[r.spec.id] = r.n;
  }
  EXPECT_EQ(reqs.size(), batched.requests());
  EXPECT_EQ(reqs.size(), batched.active().size());

  std::map<uint64_t, DraftBlock> blocks;
  while (batched.busy()) {
    std::vector<uint64_t> drafting;
    for (const auto& r : reqs)
      if (left[r.spec.id] > 0) drafting.push_back(r.spec.id);
    auto done = batched.step();
    EXPECT_EQ(drafting.size(), batched.last_step_rows()) << "one pass over every drafting request";
    EXPECT_EQ(drafting, batched.last_step_ids());
    for (uint64_t id : drafting) --left[id];
    for (auto& blk : done) {
      EXPECT_EQ(0u, left[blk.id]) << "a block completes with its last token";
      blocks[blk.id] = std::move(blk);
    }
  }
  ASSERT_EQ(reqs.size(), blocks.size());

  for (const auto& r : reqs) {
    auto tier1 = make_tier();
    auto alone = make_batcher(tier1.get());
    const PrefillResult p = alone.prefill(r.spec);
    alone.start(r.spec.id, r.n);
    size_t steps = 0;
    std::map<uint64_t, DraftBlock> mine;
    while (alone.busy()) {
      for (auto& blk : alone.step()) mine[blk.id] = std::move(blk);
      EXPECT_EQ(1u, alone.last_step_rows());
      ++steps;
    }
    EXPECT_EQ(r.n, steps);
    const DraftBlock& a = mine.at(r.spec.id);
    const DraftBlock& b = blocks.at(r.spec.id);
    const std::string what = "request " + std::to_string(r.spec.id);
    ASSERT_EQ(r.n, b.tokens.size()) << what;
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_EQ(r.spec.mode != DecodeMode::vericache, b.final) << what;
    if (b.final) expect_same_bits(a.logprobs, b.logprobs, what);
    else EXPECT_TRUE(b.logprobs.empty()) << what;
    (void)p;
  }
}

TEST(draft_batcher, a_zero_token_block_completes_at_the_next_step_without_a_row) {
  auto tier = make_tier();
  auto b = make_batcher(tier.get());
  (void)b.prefill(make_spec(1, prompt(1, 30)));
  (void)b.prefill(make_spec(2, prompt(2, 30)));
  b.start(1, 0);
  b.start(2, 2);
  auto done = b.step();
  EXPECT_EQ(1u, b.last_step_rows());
  ASSERT_EQ(1u, done.size());
  EXPECT_EQ(1u, done[0].id);
  EXPECT_TRUE(done[0].tokens.empty());
  done = b.step();
  ASSERT_EQ(1u, done.size());
  EXPECT_EQ(2u, done[0].id);
  EXPECT_FALSE(b.busy());
}

TEST(draft_batcher, a_vericache_prefill_puts_exactly_the_prompts_kv_in_the_full_tier) {
  auto tier = make_tier();
  auto b = make_batcher(tier.get());
  const auto p = prompt(7, 93);
  (void)b.prefill(make_spec(1, p));
  ASSERT_TRUE(tier->contains(1));
  EXPECT_EQ(p.size(), tier->length(1));
  for (size_t l = 0; l < size_t(test::tinycode()->config().num_layers); ++l)
    EXPECT_EQ(p.size(), tier->layer_length(1, l)) << "layer " << l;
  EXPECT_EQ(p.size() * tier->bytes_per_token(), tier->bytes_held_total());

  // Drafting writes nothing there: only verified KV goes to the full tier.
  b.start(1, 6);
  (void)run_blocks(b);
  EXPECT_EQ(p.size(), tier->length(1));

  // Full and lossy requests keep nothing in the full tier.
  (void)b.prefill(make_spec(2, prompt(8, 50), DecodeMode::full));
  (void)b.prefill(make_spec(3, prompt(9, 50), DecodeMode::lossy));
  EXPECT_FALSE(tier->contains(2));
  EXPECT_FALSE(tier->contains(3));
}

TEST(draft_batcher, full_mode_emits_the_tokens_logprobs_and_top_logprobs_of_generator_full_decoding) {
  const size_t max_tokens = 37;
  struct Case {
    uint64_t id;
    std::vector<int32_t> prompt;
    SamplingParams sampling;
  };
  std::vector<Case> cases = {{1, prompt(11, 45), SamplingParams{}},
                             {2, prompt(12, 130), SamplingParams{0.9f, 50, 0.95f, 1234, 5}},
                             {3, test::golden()["cases"][0]["prompt_ids"].get<std::vector<int32_t>>(),
                              SamplingParams{0.0f, 0, 1.0f, 0, 20}}};
  auto b = make_batcher(nullptr);  // no vericache request: no tier needed
  std::map<uint64_t, std::vector<int32_t>> ids;
  std::map<uint64_t, std::vector<float>> logprobs;
  std::map<uint64_t, std::vector<std::vector<TokenLogprob>>> tops;
  for (const auto& c : cases) {
    DraftSpec s = make_spec(c.id, c.prompt, DecodeMode::full);
    s.sampling = c.sampling;
    const PrefillResult p = b.prefill(s);
    ids[c.id].push_back(p.token);
    logprobs[c.id].push_back(p.logprob);
    if (c.sampling.top_logprobs > 0) tops[c.id].push_back(p.top_logprobs);
  }
  // Blocks of at most 16 final tokens, as the scheduler asks for them, all batched.
  for (;;) {
    bool any = false;
    for (const auto& c : cases) {
      const size_t left = max_tokens - ids[c.id].size();
      if (left == 0) continue;
      b.start(c.id, std::min<size_t>(16, left));
      any = true;
    }
    if (!any) break;
    for (auto& [id, blk] : run_blocks(b)) {
      EXPECT_TRUE(blk.final);
      ASSERT_EQ(blk.tokens.size(), blk.logprobs.size());
      ids[id].insert(ids[id].end(), blk.tokens.begin(), blk.tokens.end());
      logprobs[id].insert(logprobs[id].end(), blk.logprobs.begin(), blk.logprobs.end());
      tops[id].insert(tops[id].end(), blk.top_logprobs.begin(), blk.top_logprobs.end());
    }
  }
  for (const auto& c : cases) {
    const auto ref = generate_full(c.prompt, max_tokens, c.sampling);
    const std::string what = "request " + std::to_string(c.id);
    EXPECT_EQ(ref.output_ids, ids[c.id]) << what;
    expect_same_bits(ref.output_logprobs, logprobs[c.id], what);
    ASSERT_EQ(ref.output_top_logprobs.size(), tops[c.id].size()) << what;
    for (size_t i = 0; i < tops[c.id].size(); ++i) {
      ASSERT_EQ(ref.output_top_logprobs[i].size(), size_t(c.sampling.top_logprobs)) << what;
      std::vector<int32_t> want_ids, got_ids;
      std::vector<float> want_lps, got_lps;
      for (const TokenLogprob& t : ref.output_top_logprobs[i]) {
        want_ids.push_back(t.id);
        want_lps.push_back(t.logprob);
      }
      for (const TokenLogprob& t : tops[c.id][i]) {
        got_ids.push_back(t.id);
        got_lps.push_back(t.logprob);
      }
      EXPECT_EQ(want_ids, got_ids) << what << " token " << i;
      expect_same_bits(want_lps, got_lps, what + " token " + std::to_string(i));
    }
  }
}

// set_stream_final: each step hands over the token it decoded for every full-mode
// block not done (more = true), the block's end its last one; together, the tokens,
// logprobs and top logprobs of the blocks without streaming.
TEST(draft_batcher, streamed_final_tokens_come_one_per_step_and_equal_the_whole_blocks) {
  struct Out {
    std::map<uint64_t, std::vector<int32_t>> ids;
    std::map<uint64_t, std::vector<float>> logprobs;
    std::map<uint64_t, size_t> tops;
  };
  auto run = [](bool stream) {
    auto b = make_batcher(nullptr);
    b.set_stream_final(stream);
    Out o;
    for (uint64_t id : {1u, 2u}) {
      DraftSpec s = make_spec(id, prompt(uint32_t(20 + id), 40 + 30 * id), DecodeMode::full);
      if (id == 2) s.sampling = SamplingParams{0.9f, 50, 0.95f, 77, 3};
      (void)b.prefill(s);
      b.start(id, id == 1 ? 16 : 9);
    }
    for (int guard = 0; b.busy() && guard < 100; ++guard) {
      std::map<uint64_t, size_t> parts;
      for (auto& blk : b.step()) {
        EXPECT_TRUE(blk.final);
        if (stream) {
          EXPECT_EQ(1u, blk.tokens.size()) << "one token per step";
        } else {
          EXPECT_FALSE(blk.more);
        }
        ++parts[blk.id];
        o.ids[blk.id].insert(o.ids[blk.id].end(), blk.tokens.begin(), blk.tokens.end());
        o.logprobs[blk.id].insert(o.logprobs[blk.id].end(), blk.logprobs.begin(), blk.logprobs.end());
        o.tops[blk.id] += blk.top_logprobs.size();
      }
      if (stream) {
        for (uint64_t id : {1u, 2u}) {
          EXPECT_LE(parts[id], 1u) << "a request's part per step";
        }
      }
    }
    return o;
  };
  const Out whole = run(false), streamed = run(true);
  for (uint64_t id : {1u, 2u}) {
    EXPECT_EQ(id == 1 ? 16u : 9u, streamed.ids.at(id).size());
    EXPECT_EQ(whole.ids.at(id), streamed.ids.at(id)) << "request " << id;
    expect_same_bits(whole.logprobs.at(id), streamed.logprobs.at(id), "request " + std::to_string(id));
    EXPECT_EQ(whole.tops.at(id), streamed.tops.at(id));
  }
  EXPECT_EQ(9u, streamed.tops.at(2));
}

// Draft, verify against the full tier, commit to both tiers: the loop the actors
// run, one request at a time, here by hand.
TEST(draft_batcher, commit_keeps_the_verified_kv_and_rolls_back_the_rejected_drafts) {
  const auto model = test::tinycode();
  const size_t layers = size_t(model->config().num_layers);
  const size_t max_tokens = 60, L = 6;
  const auto p = prompt(21, 120);
  auto tier = make_tier();
  auto b = make_batcher(tier.get());
  LayerStreamer stream(*tier);
  Verifier verifier(model, 2);
  DraftSpec spec = make_spec(9, p, DecodeMode::vericache, "streaming_llm", 8.0);
  spec.max_new_tokens = max_tokens;

  const PrefillResult first = b.prefill(spec);
  const size_t base_bytes = b.fast_bytes(9);
  const size_t bpt = b.cache().bytes_per_token();
  std::vector<int32_t> out{first.token};
  std::vector<float> out_lp{first.logprob};
  auto policy = DraftLengthPolicy::fixed(L);
  size_t rounds = 0, rejected_rounds = 0, drafted = 0, accepted = 0;
  while (out.size() < max_tokens) {
    const size_t n = policy.next(max_tokens - out.size());
    b.start(9, n);
    // The verify job's t0 and p0: the last emitted token and its position.
    const auto [t0, p0] = b.pending(9);
    EXPECT_EQ(out.back(), t0);
    EXPECT_EQ(p.size() + out.size() - 1, p0);
    auto blocks = run_blocks(b);
    ASSERT_EQ(n, blocks.at(9).tokens.size());
    EXPECT_FALSE(blocks.at(9).final);

    const VerifyJob job{9, t0, p0, blocks.at(9).tokens, spec.sampling};
    stream.start(9, p0, n + 1);
    const VerifyOutcome v = verifier.run(job, stream);
    ASSERT_EQ(v.accepted + 1, v.tokens.size());
    for (size_t r = 0; r <= v.accepted; ++r)  // the mover's half of the commit
      for (size_t l = 0; l < layers; ++l) tier->write(9, l, p0 + r, v.k(l, r), v.v(l, r));
    b.commit(9, v);
    // The drafter now holds t0 and the accepted drafts, nothing after them: the
    // blocks from the prompt's last (partial) block to the last accepted position.
    const size_t bt = b.cache().config().block_tokens;
    EXPECT_EQ(base_bytes + ((p0 + v.accepted + 1 + bt - 1) / bt - p.size() / bt) * bpt * bt,
              b.fast_bytes(9));
    EXPECT_EQ(p0 + v.accepted + 1, tier->length(9));
    // pending() names the last started block until the next start.
    EXPECT_EQ(std::make_pair(t0, p0), b.pending(9));

    ++rounds;
    drafted += n;
    accepted += v.accepted;
    if (v.accepted < n) ++rejected_rounds;
    for (size_t j = 0; j < v.tokens.size() && out.size() < max_tokens; ++j) {
      out.push_back(v.tokens[j]);
      out_lp.push_back(v.logprobs[j]);
    }
    if (out.size() < max_tokens) {
      b.start(9, 0);
      EXPECT_EQ(std::make_pair(v.tokens.back(), p0 + v.accepted + 1), b.pending(9));
      (void)run_blocks(b);
    }
  }
  ASSERT_GT(rejected_rounds, 0u) << "the compressed view should make some drafts fail";

  // The emitted tokens are full decoding's, bit for bit ...
  const auto ref = generate_full(p, max_tokens, spec.sampling);
  EXPECT_EQ(ref.output_ids, out);
  expect_same_bits(ref.output_logprobs, out_lp, "logprobs");

  // ... and the drafts, built on the committed KV, are the single-request engine's.
  GeneratorConfig gc;
  gc.max_context = 2048;
  Generator gen(model, test::tinycode_tokenizer(), gc);
  GenerateOptions o;
  o.mode = DecodeMode::vericache;
  o.compressor = spec.compressor;
  o.ratio = spec.ratio;
  o.draft_length = L;
  o.max_tokens = int(max_tokens);
  o.stop_at_eos = false;
  const auto vc = gen.generate(p, o);
  EXPECT_EQ(ref.output_ids, vc.output_ids);
  EXPECT_EQ(vc.stats.rounds, rounds);
  EXPECT_EQ(vc.stats.drafted, drafted);
  EXPECT_EQ(vc.stats.accepted, accepted);
}

TEST(draft_batcher, release_frees_the_drafters_blocks_and_the_requests_full_tier_entry) {
  auto tier = make_tier();
  auto b = make_batcher(tier.get());
  EXPECT_EQ(0u, b.cache().pool().used_blocks());
  (void)b.prefill(make_spec(1, prompt(31, 70)));
  (void)b.prefill(make_spec(2, prompt(32, 90)));
  (void)b.prefill(make_spec(3, prompt(33, 50), DecodeMode::full));
  b.start(1, 5);
  b.start(2, 9);
  b.start(3, 4);
  (void)b.step();
  const size_t used = b.cache().pool().used_blocks();
  EXPECT_GT(used, 0u);

  b.release(2);  // in the middle of a block: it leaves the batch
  EXPECT_LT(b.cache().pool().used_blocks(), used);
  EXPECT_EQ(2u, b.requests());
  EXPECT_EQ((std::vector<uint64_t>{1, 3}), b.active());
  auto blocks = run_blocks(b);
  EXPECT_EQ(0u, blocks.count(2));
  EXPECT_EQ(5u, blocks.at(1).tokens.size());

  b.release(1);
  b.release(3);
  b.release(3);  // idempotent
  b.release(42);
  EXPECT_EQ(0u, b.cache().pool().used_blocks());
  EXPECT_EQ(0u, b.requests());
  EXPECT_FALSE(b.busy());
  EXPECT_THROW(b.start(1, 1), Error);
  EXPECT_THROW((void)b.pending(1), Error);

  // The drafter created the full-tier entries at prefill and frees them too (a
  // request cancelled during its prefill must not leak its full KV).
  EXPECT_FALSE(tier->contains(1));
  EXPECT_FALSE(tier->contains(2));
  EXPECT_EQ(0u, tier->bytes_held_total());
}

TEST(draft_batcher, a_failed_prefill_leaves_nothing_behind) {
  auto tier = make_tier();
  auto b = make_batcher(tier.get(), /*capacity=*/256);

  DraftSpec bad = make_spec(1, prompt(41, 60), DecodeMode::vericache, "no_such_compressor");
  EXPECT_THROW((void)b.prefill(bad), Error);
  bad.mode = DecodeMode::lossy;
  EXPECT_THROW((void)b.prefill(bad), Error);
  EXPECT_THROW((void)b.prefill(make_spec(2, {})), Error);                    // empty prompt
  EXPECT_THROW((void)b.prefill(make_spec(3, prompt(42, 400), DecodeMode::full)),
               std::exception);  // full KV > capacity
  {
    auto no_tier = make_batcher(nullptr);
    EXPECT_THROW((void)no_tier.prefill(make_spec(4, prompt(43, 30))), Error);
    EXPECT_EQ(0u, no_tier.cache().pool().used_blocks());
    EXPECT_EQ(0u, no_tier.requests());
  }
  EXPECT_EQ(0u, b.cache().pool().used_blocks());
  EXPECT_EQ(0u, b.requests());
  for (uint64_t id : {1, 2, 3}) EXPECT_FALSE(tier->contains(id)) << id;
  EXPECT_EQ(0u, tier->bytes_held_total());

  // The batcher still serves good requests, and a duplicate id is refused without
  // touching the first one.
  (void)b.prefill(make_spec(5, prompt(44, 60)));
  const size_t used = b.cache().pool().used_blocks();
  EXPECT_THROW((void)b.prefill(make_spec(5, prompt(45, 30))), Error);
  EXPECT_EQ(used, b.cache().pool().used_blocks());
  EXPECT_EQ(60u, tier->length(5));
  b.start(5, 3);
  EXPECT_EQ(3u, run_blocks(b).at(5).tokens.size());
}

TEST(draft_batcher, a_refused_prefill_does_not_release_a_full_tier_entry_it_did_not_create) {
  // The mover may still hold request 6's full KV when a prefill for id 6 comes in
  // (the tier refuses it): the drafter's cleanup must not drop the mover's copy.
  auto tier = make_tier();
  auto b = make_batcher(tier.get());
  tier->create(6);  // someone else's entry under the same id
  std::vector<float> row(size_t(tier->config().kv_heads * tier->config().head_dim), 0.5f);
  for (size_t p = 0; p < 40; ++p)
    for (size_t l = 0; l < tier->config().num_layers; ++l) tier->write(6, l, p, row.data(), row.data());
  EXPECT_THROW((void)b.prefill(make_spec(6, prompt(52, 30))), Error);
  EXPECT_EQ(0u, b.cache().pool().used_blocks());
  EXPECT_EQ(0u, b.requests());
  ASSERT_TRUE(tier->contains(6));
  EXPECT_EQ(40u, tier->length(6));
}

}  // namespace
}  // namespace vc

// Several requests' verify passes as one forward (Verifier::run_batch): each
// request's outcome is bit for bit its pass alone, whatever the other requests'
// contexts, draft lengths and sampling; what cannot be batched is refused; and the
// modelled link the batched streams share hands out its bandwidth in turn.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/generator.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/modelled_link.hpp"
#include "runtime/streamed_prefill.hpp"
#include "runtime/verifier.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

std::vector<int32_t> random_prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const ModelConfig& c = test::tinycode()->config();
  return test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

// Full decoding's first `n` tokens after `prompt` (greedy).
std::vector<int32_t> greedy_tokens(std::span<const int32_t> prompt, size_t n) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  Generator gen(test::tinycode(), test::tinycode_tokenizer(), gc);
  GenerateOptions o;
  o.mode = DecodeMode::full;
  o.max_tokens = int(n);
  o.stop_at_eos = false;
  return gen.generate(prompt, o).output_ids;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

// Requests whose prompts' full KV is in one host tier.
struct Requests {
  std::shared_ptr<const Model> model = test::tinycode();
  KvCacheConfig cfg = model->kv_config(16, DType::bf16);
  HostFullTier tier{cfg};
  std::vector<VerifyJob> jobs;

  // Request `id`: a prompt of n tokens, then full decoding's token t0 and `good`
  // of its next tokens as drafts, then `bad` random drafts.
  void add(uint64_t id, size_t n, size_t good, size_t bad, const SamplingParams& s = {}) {
    const auto prompt = random_prompt(n, uint32_t(id));
    PagedKvCache scratch(model->kv_config(16, DType::bf16));
    LayerStreamer stream(tier, 256);
    Workspace ws(1);
    tier.create(id);
    (void)prefill_to_tier(*model, prompt, id, tier, stream, scratch, ws, 256);
    const auto next = greedy_tokens(prompt, 1 + good);
    VerifyJob j;
    j.id = id;
    j.t0 = next[0];
    j.p0 = n;
    j.drafts.assign(next.begin() + 1, next.end());
    std::mt19937 rng(uint32_t(id) + 100);
    for (size_t i = 0; i < bad; ++i) j.drafts.push_back(int32_t(rng() % 2000) + 3);
    j.sampling = s;
    jobs.push_back(j);
  }
};

TEST(verify_batch, a_batched_pass_gives_each_request_the_bits_of_its_pass_alone) {
  Requests rq;
  rq.add(1, 70, 5, 2);                                 // accepts its 5 good drafts
  rq.add(2, 600, 0, 0);                                // no drafts: one row
  rq.add(3, 1100, 3, 13, SamplingParams{0.8f, 0, 1.0f, 3, 2});  // sampled, top logprobs
  rq.add(4, 300, 16, 0);                               // every draft good: the bonus token
  Verifier alone(rq.model, 2), batched(rq.model, 2);
  std::vector<VerifyOutcome> want;
  for (const VerifyJob& j : rq.jobs) {
    LayerStreamer s(rq.tier, 256);
    s.start(j.id, j.p0, j.drafts.size() + 1);
    want.push_back(alone.run(j, s));
  }
  EXPECT_EQ(want[0].accepted, 5u);
  EXPECT_EQ(want[3].accepted, 16u);
  // Every order of the requests in the pass, and stage sizes that split the
  // longer contexts into several chunks.
  for (size_t rot = 0; rot < rq.jobs.size(); ++rot) {
    std::vector<VerifyJob> jobs;
    std::vector<std::unique_ptr<LayerStreamer>> owned;
    std::vector<LayerStreamer*> streams;
    for (size_t k = 0; k < rq.jobs.size(); ++k) {
      const VerifyJob& j = rq.jobs[(k + rot) % rq.jobs.size()];
      jobs.push_back(j);
      owned.push_back(std::make_unique<LayerStreamer>(rq.tier, rot % 2 == 0 ? 128 : 1024));
      owned.back()->start(j.id, j.p0, j.drafts.size() + 1);
      streams.push_back(owned.back().get());
    }
    const std::vector<VerifyOutcome> got = batched.run_batch(jobs, streams);
    ASSERT_EQ(got.size(), jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      const VerifyOutcome& w = want[(k + rot) % rq.jobs.size()];
      const VerifyOutcome& g = got[k];
      const std::string what = "request " + std::to_string(jobs[k].id) + ", order " + std::to_string(rot);
      EXPECT_EQ(g.id, jobs[k].id) << what;
      EXPECT_EQ(g.tokens, w.tokens) << what;
      EXPECT_EQ(g.accepted, w.accepted) << what;
      expect_same_bits(g.logprobs, w.logprobs, what + " logprobs");
      expect_same_bits(g.rows_k, w.rows_k, what + " verified K");
      expect_same_bits(g.rows_v, w.rows_v, what + " verified V");
      ASSERT_EQ(g.top_logprobs.size(), w.top_logprobs.size()) << what;
      for (size_t t = 0; t < g.top_logprobs.size(); ++t) {
        EXPECT_EQ(g.top_logprobs[t], w.top_logprobs[t]) << what;
      }
      EXPECT_GT(g.seconds, 0.0) << what;
    }
  }
}

TEST(verify_batch, a_request_whose_full_kv_cannot_be_read_fails_the_pass_naming_it) {
  Requests rq;
  rq.add(1, 70, 2, 1);
  rq.add(2, 200, 2, 1);
  rq.tier.release(2);  // cancelled meanwhile: its full KV is gone
  LayerStreamer a(rq.tier, 256), b(rq.tier, 256);
  a.start(1, rq.jobs[0].p0, rq.jobs[0].drafts.size() + 1);
  b.start(2, rq.jobs[1].p0, rq.jobs[1].drafts.size() + 1);
  Verifier v(rq.model, 1);
  const std::vector<LayerStreamer*> streams{&a, &b};
  try {
    (void)v.run_batch(rq.jobs, streams);
    FAIL() << "the pass read a released request";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown request 2"), std::string::npos) << e.what();
  }
  // The verifier stays usable: request 1 alone verifies as before.
  a.start(1, rq.jobs[0].p0, rq.jobs[0].drafts.size() + 1);
  const VerifyOutcome o = v.run(rq.jobs[0], a);
  EXPECT_EQ(o.accepted, 2u);
}

TEST(verify_batch, jobs_that_gather_statistics_or_hidden_scores_are_refused_in_a_batch) {
  Requests rq;
  rq.add(1, 70, 1, 0);
  rq.add(2, 90, 1, 0);
  rq.jobs[1].collect_stats = true;
  LayerStreamer a(rq.tier, 256), b(rq.tier, 256);
  a.start(1, rq.jobs[0].p0, 2);
  b.start(2, rq.jobs[1].p0, 2);
  Verifier v(rq.model, 1);
  const std::vector<LayerStreamer*> streams{&a, &b};
  try {
    (void)v.run_batch(rq.jobs, streams);
    FAIL() << "a statistics-gathering job was batched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 2 gathers statistics"), std::string::npos) << e.what();
  }
  const std::vector<LayerStreamer*> one{&a};
  EXPECT_THROW((void)v.run_batch(rq.jobs, one), Error);  // a stream per job
}

TEST(verify_batch, forward_refuses_provider_ranges_that_do_not_cover_the_rows_in_order) {
  Requests rq;
  rq.add(1, 40, 0, 0);
  LayerStreamer s(rq.tier, 256);
  s.start(1, 40, 2);
  PagedKvCache unused(rq.model->kv_config(16, DType::bf16));
  Workspace ws(1);
  const std::vector<ForwardRow> rows{{5, 40, nullptr, true}, {6, 41, nullptr, true}};
  std::vector<float> logits;
  for (const std::vector<ProvidedRows>& bad :
       {std::vector<ProvidedRows>{{&s, 0, 1}},              // row 1 uncovered
        std::vector<ProvidedRows>{{&s, 1, 2}, {&s, 0, 1}},  // out of order
        std::vector<ProvidedRows>{{nullptr, 0, 2}}}) {
    ws.providers = bad;
    EXPECT_THROW(forward(*rq.model, rows, unused, ws, logits), Error);
  }
}

TEST(modelled_link, transfers_take_their_turn_at_the_links_bandwidth) {
  using clock = ModelledLink::clock;
  ModelledLink link(1e9);  // 1 GB/s: 1 MB takes 1 ms
  const clock::time_point t0{};
  const auto ms = [](double m) {
    return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(m));
  };
  EXPECT_EQ(link.book(t0, 1'000'000), t0 + ms(1));
  // Two streams' chunks that begin at once: the second ends a whole transfer later.
  EXPECT_EQ(link.book(t0, 1'000'000), t0 + ms(2));
  // A transfer that begins after the link went idle takes only its own time.
  EXPECT_EQ(link.book(t0 + ms(10), 500'000), t0 + ms(10.5));
  EXPECT_THROW(ModelledLink(0), Error);
  EXPECT_THROW(ModelledLink(-1), Error);
}

TEST(modelled_link, a_transfer_too_long_for_the_clock_saturates_instead_of_wrapping) {
  // At 1e-21 bytes/s a transfer's time left the clock's range and wrapped: the
  // link did not wait at all (a "1e-30 GB/s" bench ran at full speed).
  EXPECT_THROW(ModelledLink(std::numeric_limits<double>::quiet_NaN()), Error);
  EXPECT_THROW(ModelledLink(std::numeric_limits<double>::infinity()), Error);
  ModelledLink link(1e-21);
  const ModelledLink::clock::time_point t0{};
  const auto first = link.book(t0, 1);
  EXPECT_GT(first, t0 + std::chrono::hours(24 * 365 * 50));
  for (int i = 0; i < 5; ++i) EXPECT_GE(link.book(t0, size_t(1) << 62), first) << i;
}

}  // namespace
}  // namespace vc

// Draft-and-verify decoding (DESIGN.md, pipeline 1), one request:
//
//   round: pending token t0 at position p0 (emitted, its KV not yet verified)
//   1. draft  L tokens over the compressed view + paged tail: t0, d1..d(L-1) run as
//             single rows, each draw uses the request's (seed, position) noise;
//   2. verify one pass over rows t0, d1..dL (positions p0..p0+L) attending over the
//             full KV, streamed layer by layer from the full tier, and themselves;
//   3. accept the verifier's token at each position while it equals the draft;
//             the first mismatch emits the verifier's token (or, when all L match,
//             the bonus token after dL);
//   4. commit the verified KV of positions p0..p0+n to the full tier and over the
//             drafts' approximate KV in the tail; roll back the rest.
//
// Every emitted token is the verifier's, computed by batch-invariant kernels over the
// same KV bits as full-KV decoding, so ids and logprobs equal --mode full bit for bit.
#include <algorithm>
#include <chrono>
#include <filesystem>

#include <unistd.h>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/generator_request.hpp"
#include "runtime/layer_streamer.hpp"

namespace vc {

namespace {

std::unique_ptr<FullTier> make_full_tier(const GeneratorConfig& cfg, const KvCacheConfig& kv) {
  if (cfg.full_tier == "disk") {
    std::string dir = cfg.disk_dir;
    if (dir.empty())
      dir = (std::filesystem::temp_directory_path() /
             ("vericache-kv-" + std::to_string(::getpid())))
                .string();
    return std::make_unique<DiskFullTier>(kv, dir);
  }
  return std::make_unique<HostFullTier>(kv);
}

}  // namespace

void Generator::decode_verified(Request& rq) {
  using clock = std::chrono::steady_clock;
  const GenerateOptions& opt = rq.opt;
  GenerateStats& st = rq.result.stats;
  if (!full_tier_) {
    full_tier_ = make_full_tier(cfg_, cache_.config());
    streamer_ = std::make_unique<LayerStreamer>(*full_tier_);
    streamer_->set_link_bandwidth(cfg_.link_bandwidth);
  }
  st.full_tier = std::string(full_tier_->kind());
  const size_t layers = cache_.config().num_layers;
  const TierBytes tier_before = full_tier_->bytes();
  const double wait_before = streamer_->wait_seconds();

  // The prompt's full KV moves to the full tier; the drafter keeps the view + tail.
  const uint64_t id = next_request_id_++;
  full_tier_->create(id, rq.prompt_size + size_t(rq.steps));
  struct ReleaseTier {
    FullTier& tier;
    uint64_t id;
    ~ReleaseTier() { tier.release(id); }
  } release_tier{*full_tier_, id};
  full_tier_->copy_from(id, cache_, rq.seq, 0, rq.prompt_size);

  DraftLengthPolicy policy = opt.draft_auto ? DraftLengthPolicy::adaptive(opt.max_draft)
                                            : DraftLengthPolicy::fixed(opt.draft_length);
  const size_t hist_size = (opt.draft_auto ? opt.max_draft : opt.draft_length) + 1;
  st.accepted_histogram.assign(hist_size, 0);

  size_t p0 = rq.prompt_size;  // position of the pending token
  int32_t t0 = rq.choose(rq.logits, int64_t(p0), 0);
  if (rq.emit(t0, token_logprob(rq.logits, t0), rq.logits)) return;

  std::vector<ForwardRow> rows;
  std::vector<int32_t> drafts;
  std::vector<float> lg;
  const size_t V = size_t(model_->config().vocab_size);
  while (!rq.done) {
    const size_t remaining = size_t(rq.steps) - rq.result.output_ids.size();
    const size_t L = policy.next(remaining);

    // 1. Draft.
    auto t = clock::now();
    drafts.clear();
    cache_.reserve(rq.seq, p0 + L + 1);
    int32_t tok = t0;
    for (size_t i = 0; i < L; ++i) {
      rows.assign(1, ForwardRow{tok, int32_t(p0 + i), &rq.seq, true, &*rq.view});
      forward(*model_, rows, cache_, ws_, lg);
      st.compressed_bytes_read += rq.draft_step_bytes(cache_);
      tok = sample_token(lg, opt.sampling, int64_t(p0 + i + 1));
      drafts.push_back(tok);
    }
    const double draft_s = seconds_since(t);

    // 2. Verify: L + 1 rows against the full KV [0, p0) streamed from the tier.
    t = clock::now();
    rows.clear();
    rows.push_back(ForwardRow{t0, int32_t(p0), nullptr, true});
    for (size_t i = 0; i < L; ++i)
      rows.push_back(ForwardRow{drafts[i], int32_t(p0 + 1 + i), nullptr, true});
    streamer_->start(id, p0, L + 1);
    ws_.provider = streamer_.get();
    try {
      forward(*model_, rows, cache_, ws_, lg);
    } catch (...) {
      ws_.provider = nullptr;
      throw;
    }
    ws_.provider = nullptr;
    const double verify_s = seconds_since(t);

    // 3. Accept: the verifier's draw at each position; stop at the first mismatch.
    size_t n = 0;  // accepted drafts
    bool stop = false;
    for (size_t j = 0; j <= L && !stop; ++j) {
      const std::span<const float> vj(&lg[j * V], V);
      const int32_t v = sample_token(vj, opt.sampling, int64_t(p0 + 1 + j));
      stop = rq.emit(v, token_logprob(vj, v), vj);
      t0 = v;
      if (j < L && v == drafts[j]) ++n;
      else break;
    }

    // 4. Commit positions p0..p0+n (t0 and the accepted drafts), roll back the rest.
    t = clock::now();
    for (size_t r = 0; r <= n; ++r)
      for (size_t l = 0; l < layers; ++l) {
        full_tier_->write(id, l, p0 + r, streamer_->row_k(l, r), streamer_->row_v(l, r));
        cache_.write(l, rq.seq, p0 + r, streamer_->row_k(l, r), streamer_->row_v(l, r));
      }
    cache_.truncate(rq.seq, p0 + n + 1);
    st.commit_seconds += seconds_since(t);

    st.rounds += 1;
    st.drafted += L;
    st.accepted += n;
    st.accepted_histogram[std::min(n, hist_size - 1)] += 1;
    st.draft_seconds += draft_s;
    st.verify_seconds += verify_s;
    policy.observe(L, n, draft_s, verify_s);
    p0 += n + 1;
  }
  const TierBytes after = full_tier_->bytes();
  st.full_tier_bytes_read = after.read - tier_before.read;
  st.full_tier_bytes_written = after.written - tier_before.written;
  st.verify_wait_seconds = streamer_->wait_seconds() - wait_before;
  st.kv_bytes = full_tier_->bytes_held(id);
}

}  // namespace vc

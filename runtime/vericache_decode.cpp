// Draft-and-verify decoding (DESIGN.md, pipeline 1), one request:
//
//   round: pending token t0 at position p0 (emitted, its KV not yet verified)
//   1. draft  L tokens over the compressed view + paged tail: t0, d1..d(L-1) run as
//             single rows, each draw uses the request's (seed, position) noise;
//             with the n-gram level, a pass runs the pending token and the
//             proposals together and keeps the prefix the drafter agrees with,
//             plus its own next draw (draft_pass.hpp): the same drafts, fewer passes;
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
#include <optional>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/compression.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/generator_request.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/model.hpp"
#include "runtime/tp_comm.hpp"
#include "runtime/verifier.hpp"

namespace vc {

namespace {

std::unique_ptr<FullTier> make_full_tier(const GeneratorConfig& cfg, const KvCacheConfig& kv) {
  // A private directory per tier under disk_dir ("" = the temp dir).
  if (cfg.full_tier == "disk") return std::make_unique<DiskFullTier>(kv, cfg.disk_dir);
  return std::make_unique<HostFullTier>(
      kv, LayerStreamer::host_tier_chunk_blocks(cfg.stage_positions, kv.block_tokens));
}

// Rank 0's two timings on every rank of `tp`'s group (as floats, on rank 0 too, so
// every rank holds the same values); no-op outside tensor parallelism.
void share_rank0_seconds(const TensorParallelRank* tp, double (&seconds)[2]) {
  if (!tp || tp->degree <= 1) return;
  float v[2] = {0.0f, 0.0f};
  if (tp->rank == 0) v[0] = float(seconds[0]), v[1] = float(seconds[1]);
  tp->comm->all_reduce_sum(tp->rank, v, 2);
  seconds[0] = v[0], seconds[1] = v[1];
}

}  // namespace

void Generator::ensure_full_tier() {
  if (full_tier_) return;
  full_tier_ = make_full_tier(cfg_, cache_.config());
  full_tier_->set_capacity_bytes(cfg_.full_tier_bytes);
  streamer_ = std::make_unique<LayerStreamer>(*full_tier_, cfg_.stage_positions);
  streamer_->set_budget(fast_.get());
  streamer_->set_link_bandwidth(cfg_.link_bandwidth);
  verifier_ = std::make_unique<Verifier>(model_, cfg_.threads);
}

void Generator::decode_verified(Request& rq) {
  using clock = std::chrono::steady_clock;
  const GenerateOptions& opt = rq.opt;
  GenerateStats& st = rq.result.stats;
  ensure_full_tier();
  st.full_tier = std::string(full_tier_->kind());
  const size_t layers = cache_.config().num_layers;
  const TierBytes tier_before = full_tier_->bytes();
  const double wait_before = streamer_->wait_seconds();

  // The prompt's full KV is in the full tier (prefill_compressed); the drafter
  // holds the view and its tail.
  const uint64_t id = rq.tier_id;

  DraftLengthPolicy policy = opt.draft_auto ? DraftLengthPolicy::adaptive(opt.max_draft)
                                            : DraftLengthPolicy::fixed(opt.draft_length);
  if (opt.draft_auto && !opt.row_costs.empty()) policy.set_row_costs(opt.row_costs);
  const size_t hist_size = (opt.draft_auto ? opt.max_draft : opt.draft_length) + 1;
  st.accepted_histogram.assign(hist_size, 0);

  size_t p0 = rq.prompt_size;  // position of the pending token
  // The first token, unless the prefill emitted it already (Request::emit_first).
  int32_t t0 = rq.first_emitted ? rq.first_token : rq.choose(rq.logits, int64_t(p0), 0);
  if (rq.first_emitted ? rq.done : rq.emit(t0, rq.logprobs_of(rq.logits, t0), rq.logits)) return;
  // Drafts made while the full KV arrived (remote_prefill.cpp) follow the drafter's
  // guess of t0: usable when the guess was right, else their KV is rolled back.
  // They feed round after round while the verifier agrees with them: carried[i] is
  // the draft at p0 + 1 + i, the tail holds the KV of t0 and every carried draft
  // but the last.
  std::vector<int32_t> carried;
  if (!rq.predraft.empty()) {
    if (rq.predraft[0] == t0) carried.assign(rq.predraft.begin() + 1, rq.predraft.end());
    else cache_.truncate(rq.seq, p0);
    rq.predraft.clear();
  }

  std::vector<ForwardRow> rows;
  std::vector<int32_t> drafts, context;
  std::vector<uint8_t> proposed_by_ngram;
  std::vector<float> lg;
  const size_t vocab = size_t(model_->config().vocab_size);
  while (!rq.done) {
    const size_t remaining = size_t(rq.steps) - rq.result.output_ids.size();
    size_t L = policy.next(remaining);

    // 1. Draft (each pass: the pending token and any proposals of the level above).
    const auto td = clock::now();
    drafts.clear();
    cache_.reserve(rq.seq, p0 + L + 1);
    rq.note_fast(cache_);
    context.assign(rq.result.prompt_ids.begin(), rq.result.prompt_ids.end());
    context.insert(context.end(), rq.result.output_ids.begin(), rq.result.output_ids.end());
    proposed_by_ngram.clear();  // per draft: an n-gram proposal the drafter kept
    int32_t tok = t0;
    const bool from_carried = !carried.empty();
    if (from_carried) {  // this round's drafts are ready: the first L of them
      const size_t k = L = std::min(L, carried.size());
      drafts.assign(carried.begin(), carried.begin() + ptrdiff_t(k));
      proposed_by_ngram.assign(k, 0);
      st.levels.drafter_passes += k;
      st.levels.drafter_own += k;
      st.remote_predraft_rounds += 1;
    }
    while (drafts.size() < L) {
      const size_t at = p0 + drafts.size();  // tok's position
      std::vector<int32_t> g;
      if (opt.draft_hierarchy != DraftHierarchy::none) {  // (none: no lookup)
        const auto t_lookup = std::chrono::steady_clock::now();
        g = next_proposal(opt.draft_hierarchy, opt.ngram, context, L - drafts.size());
        st.levels.ngram_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t_lookup).count();
      }
      const std::vector<int32_t> toks = draft_pass_rows(tok, g);
      rows.clear();
      for (size_t i = 0; i < toks.size(); ++i)
        rows.push_back(ForwardRow{toks[i], int32_t(at + i), &rq.seq, true, &*rq.view});
      forward(*model_, rows, cache_, ws_, lg);
      st.compressed_bytes_read += rq.draft_step_bytes(cache_);
      const DraftPassResult pr = check_proposals(lg, vocab, g, opt.sampling, int64_t(at));
      if (pr.confirmed < g.size()) {  // drop the KV of proposals the drafter refused
        cache_.truncate(rq.seq, at + pr.confirmed + 1);
        cache_.reserve(rq.seq, p0 + L + 1);
      }
      st.levels.drafter_passes += 1;
      st.levels.ngram_proposed += pr.proposed;
      st.levels.ngram_confirmed += pr.confirmed;
      st.levels.drafter_own += 1;
      proposed_by_ngram.insert(proposed_by_ngram.end(), pr.confirmed, 1);
      proposed_by_ngram.push_back(0);
      drafts.insert(drafts.end(), pr.tokens.begin(), pr.tokens.end());
      context.insert(context.end(), pr.tokens.begin(), pr.tokens.end());
      tok = drafts.back();
    }
    const double draft_s = seconds_since(td);

    // 2. Verify: L + 1 rows against the full KV [0, p0) streamed from the tier;
    // 3. accept the verifier's draws up to the first mismatch.
    const bool fold_due =
        opt.fold_every > 0 && p0 >= std::max(rq.view->covered(), rq.fold_from) + opt.fold_every;
    streamer_->start(id, p0, L + 1);  // verify statistics read queries only
    const bool scores_hidden = !rq.hidden_log.empty();  // KVzap: every pass scores its rows
    const VerifyOutcome v = verifier_->run(
        VerifyJob{id, t0, p0, drafts, opt.sampling,
                  fold_due && rq.compressor->needs_stats() && !scores_hidden,
                  scores_hidden ? rq.scorer : nullptr},
        *streamer_, opt.keep_logits);
    const size_t n = v.accepted;
    for (size_t j = 0; j < v.tokens.size(); ++j) {
      const std::span<const float> vl =
          opt.keep_logits ? std::span<const float>(v.logits[j]) : std::span<const float>();
      t0 = v.tokens[j];
      TokenLogprobs lp{v.logprobs[j], v.top_logprobs.empty() ? std::vector<TokenLogprob>{}
                                                             : v.top_logprobs[j]};
      if (rq.emit(t0, std::move(lp), vl)) break;
    }

    // 4. Commit positions p0..p0+n (t0 and the accepted drafts), roll back the rest
    // (unless the carried drafts go on: every draft accepted and the verifier's next
    // token is the next carried one, whose KV and its successors' stay in the tail).
    auto t = clock::now();
    for (size_t r = 0; r <= n; ++r)
      for (size_t l = 0; l < layers; ++l) {
        full_tier_->write(id, l, p0 + r, v.k(l, r), v.v(l, r));
        cache_.write(l, rq.seq, p0 + r, v.k(l, r), v.v(l, r));
      }
    if (from_carried) {
      const bool goes_on = !rq.done && n == L && carried.size() > L + 1 && t0 == carried[L];
      if (goes_on) carried.erase(carried.begin(), carried.begin() + ptrdiff_t(L + 1));
      else carried.clear();
    }
    if (carried.empty()) cache_.truncate(rq.seq, p0 + n + 1);
    if (fold_due) {  // the view takes over [0, p0): it keeps its budget as we grow
      const size_t read_before = full_tier_->bytes_read_total();
      std::optional<PrefillStats> logged;  // KVzap: the scores of [0, p0)
      if (scores_hidden) logged = rq.hidden_log.stats(p0);
      auto nv = refold(*rq.compressor, *full_tier_, id, p0, logged ? &*logged : v.stats.get(),
                       *model_, opt.ratio);
      st.full_tier_bytes_read_refold += full_tier_->bytes_read_total() - read_before;
      if (nv) {
        rq.view_charge.resize(nv->held_bytes(), "the compressed view");
        rq.view = std::move(*nv);
        cache_.release_prefix(rq.seq, p0);
        st.folds += 1;
      }
    }
    if (scores_hidden) rq.hidden_log.append(v.hidden_scores, n + 1);
    st.commit_seconds += seconds_since(t);
    const double verify_s = v.seconds;

    st.rounds += 1;
    st.drafted += L;
    st.accepted += n;
    for (size_t j = 0; j < n; ++j) st.levels.ngram_accepted += proposed_by_ngram[j];
    st.accepted_histogram[std::min(n, hist_size - 1)] += 1;
    st.draft_seconds += draft_s;
    st.verify_seconds += verify_s;
    // Under tensor parallelism every rank's adaptive policy observes rank 0's times,
    // so the ranks choose the same lengths (their own passes take different times).
    double seconds[2] = {draft_s, verify_s};
    if (opt.draft_auto) share_rank0_seconds(model_->tp(), seconds);
    policy.observe(L, n, seconds[0], seconds[1]);
    p0 += n + 1;
  }
  const TierBytes after = full_tier_->bytes();
  st.full_tier_bytes_read = after.read - tier_before.read - st.full_tier_bytes_read_refold;
  st.full_tier_bytes_written = after.written - tier_before.written;
  st.verify_wait_seconds = streamer_->wait_seconds() - wait_before;
  st.kv_bytes = full_tier_->bytes_held(id);
  st.fast_bytes_end = rq.draft_step_bytes(cache_);
}

}  // namespace vc

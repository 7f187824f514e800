// Continuous batching of draft (and full/lossy decode) steps across requests.
#include "runtime/draft_batcher.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/error.hpp"
#include "runtime/kvzap_file.hpp"
#include "runtime/remote_prefix.hpp"
#include "runtime/streamed_prefill.hpp"

namespace vc {

DraftSpec make_draft_spec(uint64_t id, std::span<const int32_t> prompt,
                          const GenerateOptions& opt) {
  DraftSpec s;
  s.id = id;
  s.prompt.assign(prompt.begin(), prompt.end());
  s.mode = opt.mode;
  s.compressor = opt.compressor;
  s.compressor_params = opt.compressor_params;
  s.ratio = opt.ratio;
  s.stats_window = opt.stats_window;
  s.prefill_chunk = opt.prefill_chunk;
  s.max_new_tokens = size_t(std::max(0, opt.max_tokens));
  s.fold_every = opt.fold_every;
  s.sampling = opt.sampling;
  s.draft_hierarchy = opt.draft_hierarchy;
  s.ngram = opt.ngram;
  return s;
}

DraftBatcher::DraftBatcher(std::shared_ptr<const Model> model, FullTier* tier,
                           size_t capacity_tokens, DType kv_dtype, int threads,
                           FastMemory* budget, size_t stage_positions, size_t block_tokens)
    : model_(std::move(model)), tier_(tier), budget_(budget), ws_(threads),
      cache_(model_->kv_config(capacity_tokens, kv_dtype, block_tokens)) {
  cache_.set_budget(budget_);
  if (tier_ != nullptr) {
    stream_ = std::make_unique<LayerStreamer>(*tier_, stage_positions);
    stream_->set_budget(budget_);
  }
}

DraftBatcher::~DraftBatcher() = default;

DraftBatcher::Req& DraftBatcher::get(uint64_t id, const char* op) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) throw Error(std::string("drafter: ") + op + ": unknown request " + std::to_string(id));
  return it->second;
}

const DraftBatcher::Req& DraftBatcher::get(uint64_t id, const char* op) const {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) throw Error(std::string("drafter: ") + op + ": unknown request " + std::to_string(id));
  return it->second;
}

PrefillResult DraftBatcher::prefill(const DraftSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  if (reqs_.count(spec.id)) throw Error("drafter: request " + std::to_string(spec.id) + " exists");
  if (spec.prompt.empty()) throw Error("drafter: request " + std::to_string(spec.id) + " has an empty prompt");
  std::unique_ptr<Compressor> compressor;
  std::shared_ptr<const HiddenScorer> scorer;
  if (spec.mode != DecodeMode::full) {
    compressor = make_compressor(spec.compressor, spec.compressor_params);
    scorer = attach_model_files(*compressor, *model_);
  }
  const Compressor* planner = compressor.get();
  if (spec.mode == DecodeMode::vericache && tier_ == nullptr)
    throw Error("drafter: vericache needs a full tier");
  if (spec.mode != DecodeMode::full && tier_ == nullptr)
    throw Error("drafter: lossy and vericache requests need a full tier");
  Req r;
  r.spec = spec;
  r.scorer = scorer;
  bool tier_created = false;  // the cleanup below must not drop an entry it did not make
  std::optional<MetPrefix> met;
  try {
    PrefilledRequest p;
    if (!spec.fetched_views.empty() && spec.mode != DecodeMode::full) {
      if (compressor->stats_needs().hidden)
        throw Error("drafter: request " + std::to_string(spec.id) + ": '" + spec.compressor +
                    "' scores every prompt row's hidden state: it cannot start from a fetched view");
      p = prefill_over_fetched_view(spec, r);
      r.exact_pending = spec.mode == DecodeMode::vericache;
    } else if (spec.mode == DecodeMode::full) {
      p = prefill_request(*model_, spec.prompt, r.seq, cache_, ws_, nullptr, spec.ratio,
                          spec.stats_window, spec.prefill_chunk);
    } else {
      // The prompt's KV goes to the full tier, never to fast memory; lossy mode
      // drops it once the view is built.
      if (!spec.tier_ready) {
        tier_->create(spec.id, spec.prompt.size() + spec.max_new_tokens);
        tier_created = true;
      }
      size_t cached = spec.tier_ready ? spec.remote_cached : 0;
      if (!spec.remote_meetings.empty()) {
        // The entry is the scheduler's (tier_ready), made here, off its thread.
        tier_->create(spec.id, spec.prompt.size() + spec.max_new_tokens);
        tier_created = true;  // until the prefill is through: a failure drops it
        const TensorParallelRank* tp = model_->tp();
        BackFetchMeeting& meeting = *spec.remote_meetings.at(tp != nullptr ? size_t(tp->rank) : 0);
        std::optional<MeetingRanks> ranks;
        if (tp != nullptr && tp->degree > 1) ranks = meeting_ranks(*tp);
        const size_t T = meeting.chunk_tokens();
        met = meet_back_fetch(
            meeting,
            [&](size_t f) {
              (void)prefill_to_tier(*model_, std::span(spec.prompt).subspan(f * T, T), spec.id, *tier_,
                                    *stream_, cache_, ws_, spec.prefill_chunk);
            },
            *tier_, spec.id, /*wait_for_run=*/false, ranks ? &*ranks : nullptr);
        cached = met->cached_chunks() * T;
        r.spec.remote_meetings.clear();
      }
      // The first token goes to the hook once the exact logits exist, before the
      // view is built (the same draw as r.cur below: a function of the logits, the
      // seed and the position).
      PromptLogitsHook first;
      if (first_token_hook_)
        first = [&](std::span<const float> lg) {
          const int32_t tok = sample_token(lg, spec.sampling, int64_t(spec.prompt.size()));
          TokenLogprobs lp = token_logprobs(lg, tok, size_t(spec.sampling.top_logprobs));
          first_token_hook_(spec.id, tok, lp.logprob, std::move(lp.top));
        };
      p = prefill_compressed(*model_, spec.prompt, r.seq, cache_, ws_, *planner, spec.ratio,
                             spec.stats_window, spec.prefill_chunk, *tier_, *stream_, spec.id, cached,
                             first);
      r.view_charge = FastCharge(budget_, p.view->held_bytes(),
                                 "the compressed view of request " + std::to_string(spec.id));
      if (spec.mode == DecodeMode::lossy && tier_created) {
        tier_->release(spec.id);
        tier_created = false;
      }
    }
    r.view = std::move(p.view);
    if (!p.hidden_scores.empty() && spec.mode == DecodeMode::vericache) {
      const ModelConfig& mc = model_->whole_config();  // the scores are model-wide
      r.hidden_log = HiddenScoreLog(size_t(mc.num_layers), size_t(mc.num_heads),
                                    size_t(mc.num_kv_heads), size_t(mc.head_dim),
                                    compressor->hidden_scorer()->outputs());
      r.hidden_log.append(p.hidden_scores, spec.prompt.size());
    }
    r.compressor = std::move(compressor);
    r.pos = spec.prompt.size();
    r.cur = sample_token(p.logits, spec.sampling, int64_t(r.pos));
    if (spec.mode == DecodeMode::vericache && spec.draft_hierarchy != DraftHierarchy::none) {
      r.context = spec.prompt;
      r.context.push_back(r.cur);
    }
    PrefillResult out;
    out.id = spec.id;
    out.token = r.cur;
    TokenLogprobs lp = token_logprobs(p.logits, r.cur, size_t(spec.sampling.top_logprobs));
    out.logprob = lp.logprob;
    out.top_logprobs = std::move(lp.top);
    if (r.view) {
      out.compressed_bytes = r.view->stored_bytes();
      out.compressed_full_bytes = r.view->full_bytes();
      if (spec.copy_view && spec.fetched_views.empty())
        out.views = {std::make_shared<const CompressedView>(*r.view)};
    }
    out.exact_pending = r.exact_pending;
    out.met = std::move(met);
    tier_created = false;  // the scheduler's from here on
    out.fast_bytes_peak = note_fast(r);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reqs_.emplace(spec.id, std::move(r));
    return out;
  } catch (...) {
    cache_.free(r.seq);
    if (tier_created) tier_->release(spec.id);
    for (const auto& m : spec.remote_meetings) (void)m->stop();  // their fetchers take nothing more
    throw;
  }
}

PrefilledRequest DraftBatcher::prefill_over_fetched_view(const DraftSpec& spec, Req& r) {
  const size_t rank = model_->tp() != nullptr ? size_t(model_->tp()->rank) : 0;
  if (rank >= spec.fetched_views.size() || !spec.fetched_views[rank])
    throw Error("drafter: request " + std::to_string(spec.id) + ": no fetched view for rank " +
                std::to_string(rank) + " (" + std::to_string(spec.fetched_views.size()) + " given)");
  const CompressedView& fetched = *spec.fetched_views[rank];
  const size_t n = spec.prompt.size(), covered = fetched.covered();
  if (covered == 0 || covered >= n)
    throw Error("drafter: request " + std::to_string(spec.id) + ": the fetched view covers " +
                std::to_string(covered) + " positions of a " + std::to_string(n) +
                "-token prompt (1 to n - 1 expected)");
  PrefilledRequest p;
  p.view = fetched;
  // The suffix sits in the tail on its own reservation (the engine's one chunk);
  // the first fold comes fold_every positions after the prompt, scored as usual.
  r.fold_from = n;
  r.view_charge = FastCharge(budget_, p.view->held_bytes(),
                             "the fetched compressed view of request " + std::to_string(spec.id));
  // The suffix [covered, n) attends over the view: drafting work, its KV and the
  // first token are guesses (exact ones come from finish_prefill in vericache).
  cache_.start_at(r.seq, covered);
  const size_t step = spec.prefill_chunk > 0 ? spec.prefill_chunk : n;
  std::vector<ForwardRow> rows;
  const PromptRows prompt_rows(ws_);
  for (size_t b = covered; b < n; b += step) {
    between_prefill_chunks(ws_);
    const size_t e = std::min(n, b + step);
    cache_.reserve(r.seq, e);
    rows.clear();
    for (size_t i = b; i < e; ++i)
      rows.push_back(ForwardRow{spec.prompt[i], int32_t(i), &r.seq, i + 1 == n, &*p.view});
    forward(*model_, rows, cache_, ws_, p.logits);
  }
  return p;
}

PrefillResult DraftBatcher::finish_prefill(uint64_t id, size_t cached) {
  const auto t0 = std::chrono::steady_clock::now();
  Req& r = get(id, "finish_prefill");
  const std::string who = "drafter: finish_prefill: request " + std::to_string(id);
  if (!r.exact_pending) throw Error(who + " does not wait for an exact prefill");
  if (std::find(active_.begin(), active_.end(), id) != active_.end())
    throw Error(who + " has a block in progress");
  const std::span<const int32_t> prompt(r.spec.prompt);
  const size_t n = prompt.size(), covered = r.view->covered();
  if (cached >= n)
    throw Error(who + ": " + std::to_string(cached) + " cached positions of a " +
                std::to_string(n) + "-token prompt (at most n - 1)");
  // Complete chunks past the fetched view: the view is rebuilt over the whole
  // prompt from the exact KV, as a local prefill builds it, and published.
  const size_t T = r.spec.publish_chunk_tokens;
  std::vector<float> logits;
  std::optional<CompressedView> rebuilt;
  if (T > 0 && n / T * T > covered) {
    PrefilledRequest p = prefill_and_compress(*model_, prompt, cache_, ws_, *r.compressor, r.spec.ratio,
                                              r.spec.stats_window, r.spec.prefill_chunk, *tier_,
                                              *stream_, id, cached);
    logits = std::move(p.logits);
    rebuilt = std::move(p.view);
  } else {
    logits = prefill_to_tier(*model_, prompt.subspan(cached), id, *tier_, *stream_, cache_, ws_,
                             r.spec.prefill_chunk);
  }
  // The tail's suffix takes the exact KV (what a local prefill leaves it), or the
  // rebuilt view covers it.
  PrefillResult out;
  if (rebuilt) {  // the suffix's tail blocks go before the larger view is charged
    cache_.release_prefix(r.seq, n);
    r.view_charge.resize(rebuilt->held_bytes(), "the compressed view of request " + std::to_string(id));
    r.view = std::move(*rebuilt);
    out.views = {std::make_shared<const CompressedView>(*r.view)};
  } else {
    copy_tier_rows(*tier_, id, covered, n, cache_, r.seq);
  }
  const int32_t tok = sample_token(logits, r.spec.sampling, int64_t(n));
  // A block drafted from the guess starts at n with the guess: its drafts follow
  // the exact token only when the guess was it.
  const bool kept = r.pos > n && r.p0 == n && r.start_token == tok;
  if (!kept) {
    cache_.truncate(r.seq, n);
    r.pos = r.p0 = n;
    r.cur = r.start_token = tok;
    r.block = DraftBlock{};
    if (!r.context.empty()) {
      r.context.resize(n);
      r.context.push_back(tok);
    }
  }
  r.exact_pending = false;
  out.id = id;
  out.token = tok;
  TokenLogprobs lp = token_logprobs(logits, tok, size_t(r.spec.sampling.top_logprobs));
  out.logprob = lp.logprob;
  out.top_logprobs = std::move(lp.top);
  out.compressed_bytes = r.view->stored_bytes();
  out.compressed_full_bytes = r.view->full_bytes();
  out.drafts_kept = kept;
  out.fast_bytes_peak = note_fast(r);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void DraftBatcher::start(uint64_t id, size_t n, bool ahead) {
  Req& r = get(id, "start");
  const bool guessed = r.exact_pending && r.pos > r.spec.prompt.size();
  if (ahead && !guessed)
    throw Error("drafter: request " + std::to_string(id) +
                " drafts ahead only after its block from the guess, before finish_prefill");
  if (!ahead && guessed)
    throw Error("drafter: request " + std::to_string(id) +
                " drafts one block from its guess before finish_prefill");
  if (!ahead) {
    r.p0 = r.pos;
    r.start_token = r.cur;
  }
  r.want = n;
  r.block = DraftBlock{};
  r.block.id = id;
  r.block.final = r.spec.mode != DecodeMode::vericache;
  r.block.wants_stats =
      !r.block.final && fold_due(r) && r.compressor->needs_stats() && r.hidden_log.empty();
  if (!r.block.final && !r.hidden_log.empty()) r.block.hidden = r.scorer;
  r.block_end = r.pos + n + 1;
  cache_.reserve(r.seq, r.block_end);
  note_fast(r);
  if (std::find(active_.begin(), active_.end(), id) == active_.end()) active_.push_back(id);
}

std::vector<DraftBlock> DraftBatcher::step() {
  std::vector<DraftBlock> done;
  std::vector<ForwardRow> rows;
  std::vector<uint64_t> stepping;
  std::vector<std::vector<int32_t>> proposals;  // per stepping request (draft_pass.hpp)
  std::vector<size_t> first_row;
  for (uint64_t id : active_) {
    Req& r = reqs_.at(id);
    if (r.want == 0 || r.fold_wanted) continue;  // (a pending fold: its view is being rebuilt)
    const CompressedView* view = r.view ? &*r.view : nullptr;
    std::vector<int32_t> g;
    if (!r.block.final && r.spec.draft_hierarchy != DraftHierarchy::none) {  // (none: no lookup)
      const auto t_lookup = std::chrono::steady_clock::now();
      g = next_proposal(r.spec.draft_hierarchy, r.spec.ngram, r.context, r.want);
      r.block.levels.ngram_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_lookup).count();
    }
    first_row.push_back(rows.size());
    const std::vector<int32_t> toks = draft_pass_rows(r.cur, g);
    for (size_t i = 0; i < toks.size(); ++i)
      rows.push_back(ForwardRow{toks[i], int32_t(r.pos + i), &r.seq, true, view});
    proposals.push_back(std::move(g));
    stepping.push_back(id);
  }
  last_ids_ = stepping;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  if (!rows.empty()) forward(*model_, rows, cache_, ws_, logits);
  const double per_row = rows.empty() ? 0.0
                                      : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                            double(rows.size());
  const size_t V = size_t(model_->config().vocab_size);
  for (size_t i = 0; i < stepping.size(); ++i) {
    Req& r = reqs_.at(stepping[i]);
    const std::vector<int32_t>& g = proposals[i];
    const std::span<const float> lg(&logits[first_row[i] * V], (g.size() + 1) * V);
    const DraftPassResult pr = check_proposals(lg, V, g, r.spec.sampling, int64_t(r.pos));
    if (r.block.final) {
      TokenLogprobs lp = token_logprobs(lg.first(V), pr.tokens[0], size_t(r.spec.sampling.top_logprobs));
      r.block.logprobs.push_back(lp.logprob);
      if (r.spec.sampling.top_logprobs > 0) r.block.top_logprobs.push_back(std::move(lp.top));
    }
    if (pr.confirmed < g.size()) {  // drop the KV of proposals the drafter refused
      cache_.truncate(r.seq, r.pos + pr.confirmed + 1);
      cache_.reserve(r.seq, r.block_end);
    }
    r.block.tokens.insert(r.block.tokens.end(), pr.tokens.begin(), pr.tokens.end());
    r.block.proposed_by_ngram.insert(r.block.proposed_by_ngram.end(), pr.confirmed, 1);
    r.block.proposed_by_ngram.push_back(0);
    r.block.levels.drafter_passes += 1;
    r.block.levels.drafter_own += 1;
    r.block.levels.ngram_proposed += pr.proposed;
    r.block.levels.ngram_confirmed += pr.confirmed;
    r.block.seconds += per_row * double(g.size() + 1);
    if (!r.context.empty()) r.context.insert(r.context.end(), pr.tokens.begin(), pr.tokens.end());
    r.cur = pr.tokens.back();
    r.pos += pr.tokens.size();
    r.want -= pr.tokens.size();
  }
  for (auto it = active_.begin(); it != active_.end();) {
    Req& r = reqs_.at(*it);
    if (r.want == 0) {
      r.block.fast_bytes_peak = r.fast_peak;
      done.push_back(std::move(r.block));
      it = active_.erase(it);
    } else {
      if (stream_final_ && r.block.final && !r.block.tokens.empty()) {  // this step's, ahead
        DraftBlock part;
        part.id = r.block.id;
        part.final = part.more = true;
        std::swap(part.tokens, r.block.tokens);
        std::swap(part.logprobs, r.block.logprobs);
        std::swap(part.top_logprobs, r.block.top_logprobs);
        std::swap(part.seconds, r.block.seconds);
        part.fast_bytes_peak = r.fast_peak;
        done.push_back(std::move(part));
      }
      ++it;
    }
  }
  return done;
}

void DraftBatcher::commit(uint64_t id, const VerifyOutcome& v, size_t ahead, bool defer_fold) {
  Req& r = get(id, "commit");
  if (ahead > 0 && r.pos != r.p0 + v.accepted + ahead)
    throw Error("drafter: commit of request " + std::to_string(id) + ": " + std::to_string(ahead) +
                " drafts ahead past position " + std::to_string(r.p0 + v.accepted) +
                ", but the last draft is at " + std::to_string(r.pos));
  const size_t layers = size_t(model_->config().num_layers);
  for (size_t row = 0; row <= v.accepted; ++row)
    for (size_t l = 0; l < layers; ++l) cache_.write(l, r.seq, r.p0 + row, v.k(l, row), v.v(l, row));
  if (ahead == 0) cache_.truncate(r.seq, r.p0 + v.accepted + 1);
  if (fold_due(r) && tier_ != nullptr) {
    std::shared_ptr<const PrefillStats> stats = v.stats;
    if (!r.hidden_log.empty())  // KVzap: the scores of [0, p0), before this round's
      stats = std::make_shared<const PrefillStats>(r.hidden_log.stats(r.p0));
    if (defer_fold) {  // over [0, p0) as now: with drafts ahead p0 moves on below
      r.fold_wanted = true;
      r.fold_stats = std::move(stats);
      r.fold_n = r.p0;
    } else {
      refold_view(id, r, r.p0, stats.get(), nullptr);
    }
  }
  if (!r.hidden_log.empty()) {
    if (v.hidden_scores.empty())
      throw Error("drafter: commit of request " + std::to_string(id) +
                  ": the verify pass did not score its rows (VerifyJob::hidden)");
    r.hidden_log.append(v.hidden_scores, v.accepted + 1);
  }
  note_fast(r);
  if (ahead > 0) {  // the verified tokens are the drafts: the tail and context stand
    r.p0 += v.accepted + 1;
    r.start_token = v.tokens.back();
    return;
  }
  r.pos = r.p0 + v.accepted + 1;
  r.cur = v.tokens.back();
  if (!r.context.empty()) {  // the verifier's tokens replace the drafts
    r.context.resize(r.p0 + 1);
    r.context.insert(r.context.end(), v.tokens.begin(), v.tokens.end());
  }
}

void DraftBatcher::refold_view(uint64_t id, Req& r, size_t n, const PrefillStats* stats, Workspace* ws) {
  if (auto nv = refold(*r.compressor, *tier_, id, n, stats, *model_, r.spec.ratio, ws)) {
    r.view_charge.resize(nv->held_bytes(), "the compressed view of request " + std::to_string(id));
    r.view = std::move(*nv);
    cache_.release_prefix(r.seq, n);
    ++folds_;
  }
}

bool DraftBatcher::fold_pending(uint64_t id) const { return get(id, "fold_pending").fold_wanted; }

void DraftBatcher::fold(uint64_t id) {
  Req& r = get(id, "fold");
  if (!r.fold_wanted) return;
  const std::shared_ptr<const PrefillStats> stats = std::move(r.fold_stats);  // leaves it empty
  refold_view(id, r, r.fold_n, stats.get(), &ws_);
  r.fold_wanted = false;  // a throwing rebuild leaves it pending: the request fails
  note_fast(r);
}

bool DraftBatcher::busy() const {
  for (uint64_t id : active_)
    if (!reqs_.at(id).fold_wanted) return true;
  return false;
}

bool DraftBatcher::fold_due(const Req& r) const {
  return r.spec.mode == DecodeMode::vericache && r.view && r.spec.fold_every > 0 &&
         r.p0 >= std::max(r.view->covered(), r.fold_from) + r.spec.fold_every;
}

void DraftBatcher::release(uint64_t id) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return;
  cache_.free(it->second.seq);
  // The full-tier entry was created here at prefill: free it too, so a request
  // cancelled while its prefill was in flight (the mover's release then came
  // first and found nothing) leaves nothing behind.
  if (it->second.spec.mode == DecodeMode::vericache && !it->second.spec.tier_ready &&
      tier_ != nullptr)
    tier_->release_if_present(id);  // the mover may release it at the same time
  reqs_.erase(it);
  active_.erase(std::remove(active_.begin(), active_.end(), id), active_.end());
}

std::pair<int32_t, size_t> DraftBatcher::pending(uint64_t id) const {
  const Req& r = get(id, "pending");
  return {r.start_token, r.p0};
}

size_t DraftBatcher::fast_bytes(const Req& r) const {
  size_t blocks = 0;
  for (int32_t b : r.seq.blocks) blocks += b >= 0 ? 1 : 0;
  return (r.view ? r.view->held_bytes() : 0) + blocks * cache_.block_bytes();
}

size_t DraftBatcher::note_fast(Req& r) const {
  r.fast_peak = std::max(r.fast_peak, fast_bytes(r));
  return r.fast_peak;
}

size_t DraftBatcher::fast_bytes(uint64_t id) const { return fast_bytes(get(id, "fast_bytes")); }

size_t DraftBatcher::fast_bytes_peak(uint64_t id) const { return get(id, "fast_bytes_peak").fast_peak; }

}  // namespace vc

// Scheduler logic (see the header). Every handler tolerates messages about
// requests that are already gone (cancelled or failed meanwhile).
#include "actors/scheduler_core.hpp"

#include <algorithm>
#include <utility>

namespace vc::actors {

namespace {
constexpr size_t kFinalBlock = 16;  // full/lossy decode: tokens per drafter message
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
// Token i's top-N list of a message (empty when the request asked for none).
std::span<const TokenLogprob> top_at(const std::vector<std::vector<TokenLogprob>>& lists,
                                     size_t i) {
  return i < lists.size() ? std::span<const TokenLogprob>(lists[i])
                          : std::span<const TokenLogprob>();
}
}  // namespace

SchedulerCore::SchedulerCore(Outbox& out, size_t max_active, size_t max_queue, bool lockstep,
                             const Tokenizer* tokenizer, std::shared_ptr<LiveCounters> counters)
    : out_(out), max_active_(std::max<size_t>(1, max_active)), max_queue_(max_queue),
      lockstep_(lockstep), tokenizer_(tokenizer),
      counters_(counters ? std::move(counters) : std::make_shared<LiveCounters>()) {}

std::shared_ptr<RequestCtx> SchedulerCore::find(uint64_t id) const {
  auto it = active_.find(id);
  return it == active_.end() ? nullptr : it->second;
}

void SchedulerCore::submit(std::shared_ptr<RequestCtx> ctx) {
  ++counters_->submitted;
  const bool admissible_now = queue_.empty() && active_.size() < max_active_ && fits(*ctx);
  if (!admissible_now && queue_.size() >= max_queue_) {
    ++counters_->rejected;
    ctx->result.ok = false;
    ctx->result.finish_reason = "error";
    ctx->result.error = "overloaded: " + std::to_string(queue_.size()) +
                        " requests already waiting (max_queue " + std::to_string(max_queue_) +
                        "); retry later";
    ctx->promise.set_value(std::move(ctx->result));
    return;
  }
  ctx->submitted = std::chrono::steady_clock::now();
  queue_.push_back(std::move(ctx));
  admit();
}

void SchedulerCore::publish_sizes() {
  counters_->running.store(active_.size(), std::memory_order_relaxed);
  counters_->waiting.store(queue_.size(), std::memory_order_relaxed);
}

void SchedulerCore::admit() {
  while (active_.size() < max_active_ && !queue_.empty() && fits(*queue_.front())) {
    auto c = std::move(queue_.front());
    queue_.pop_front();
    fast_reserved_ += c->fast_need;
    tier_reserved_ += c->tier_need;
    counters_->fast_reserved.store(fast_reserved_, std::memory_order_relaxed);
    c->started = std::chrono::steady_clock::now();
    c->result.stats.queue_seconds = since(c->submitted);
    counters_->prompt_tokens += c->spec.prompt.size();
    active_.emplace(c->id, c);
    if (c->remote) {
      c->phase = RequestCtx::Phase::fetch;
      c->result.stats.remote = true;
      if (c->compressed_first) {  // the prompt's last position is always computed
        const size_t T = std::max<size_t>(remote_chunk_, 1);
        c->cf_fetch_end = (c->spec.prompt.size() - 1) / T * T;
        fetch_compressed_segment(*c, 0);
      } else
        start_full_flow(*c);
    } else {
      start_prefill(*c);
    }
  }
  publish_sizes();
}

void SchedulerCore::start_prefill(RequestCtx& c) {
  c.phase = RequestCtx::Phase::prefill;
  out_.prefill(c.spec);
}

size_t SchedulerCore::remaining(const RequestCtx& c) const {
  return c.stop.max_tokens - c.result.output_ids.size();
}

size_t SchedulerCore::pending_position(const RequestCtx& c) const {
  return c.spec.prompt.size() + c.result.output_ids.size() - 1;
}

std::string SchedulerCore::push(RequestCtx& c, int32_t tok, float logprob,
                                std::span<const TokenLogprob> top) {
  c.result.output_ids.push_back(tok);
  c.result.output_logprobs.push_back(logprob);
  std::span<const vericache::TokenLogprob> reported;
  if (c.spec.sampling.top_logprobs > 0) {
    auto& list = c.result.output_top_logprobs.emplace_back();
    for (const TokenLogprob& t : top) list.push_back({t.id, t.logprob});
    reported = list;
  }
  ++counters_->tokens;
  if (c.on_token) {
    // The embedder's code on the scheduler's thread: an exception from it ends this
    // request, never the scheduler (every other request would be lost with it).
    try {
      c.on_token(c.id, vericache::EmittedToken{tok, logprob, reported});
    } catch (const std::exception& e) {
      c.callback_error = std::string("the token callback threw: ") + e.what();
    } catch (...) {
      c.callback_error = "the token callback threw an exception that is not a std::exception";
    }
    if (!c.callback_error.empty()) return "error";
  }
  return c.stop.check(c.result.output_ids);
}

bool SchedulerCore::emit(RequestCtx& c, int32_t tok, float logprob,
                         std::span<const TokenLogprob> top) {
  const std::string reason = push(c, tok, logprob, top);
  if (reason.empty()) return false;
  finish(c, reason, c.callback_error);
  return true;
}

void SchedulerCore::next_round(RequestCtx& c) {
  c.phase = RequestCtx::Phase::draft;
  if (lockstep_ && verifying_) {
    held_for_draft_.push_back(c.id);
    return;
  }
  if (c.spec.mode == DecodeMode::vericache) {
    c.round_drafts = c.policy.next(remaining(c));
    out_.draft(c.id, c.round_drafts, false);
  } else {
    out_.draft(c.id, std::min(kFinalBlock, remaining(c)), false);
  }
}

void SchedulerCore::on_prefilled(const PrefillResult& r) {
  auto c = find(r.id);
  if (!c) return;
  c->result.stats.prefill_seconds = r.seconds;
  c->result.stats.compressed_bytes = r.compressed_bytes;
  c->result.stats.compressed_full_bytes = r.compressed_full_bytes;
  c->result.stats.fast_bytes_peak = std::max(c->result.stats.fast_bytes_peak, r.fast_bytes_peak);
  if (r.exact_pending) {
    // Compressed first, vericache: r.token is the drafter's guess. While the full
    // chunks are on their way it drafts one block from it (not in lock step, whose
    // barriers count rounds).
    c->cf_guessed = true;
    if (!c->cf_full_in && !lockstep_ && remaining(*c) > 1) {
      const size_t L = c->policy.next(remaining(*c) - 1);
      if (L > 0) {
        c->cf_predrafting = true;
        c->round_drafts = L;
        out_.draft(c->id, L, false);
      }
    }
    maybe_finish_prefill(*c);
    return check_barriers();
  }
  // A whole prompt prefilled here, from its first position (no meeting, no fetched
  // prefix or view): the drafter's seconds per position, for pricing recompute
  // fronts. (After a fetch, the prefill's seconds also cover compressing the whole
  // prompt: not a rate of the suffix alone.)
  if (!r.met && !c->cf_active && !c->meeting_started && c->spec.remote_cached == 0)
    front_rates_.add_prefill(c->spec.prompt.size(), r.seconds);
  c->cf_active = false;  // lossy, compressed first: decodes over the fetched view
  c->result.stats.prefilled_after_seconds = since(c->submitted);
  if (r.met) note_meeting(*c, *r.met);
  if (c->tier_held) publish_full_chunks(*c, r.views);
  if (c->first_sent) {  // on_first_token emitted it
    if (c->result.output_ids.empty() || c->result.output_ids[0] != r.token) {
      finish(*c, "error", "drafter: request " + std::to_string(c->id) +
                              ": the first token sent ahead differs from the prefill's");
      return check_barriers();
    }
    if (!c->stop_after_prefill.empty()) finish(*c, c->stop_after_prefill, c->callback_error);
    else next_round(*c);
  } else if (!emit(*c, r.token, r.logprob, r.top_logprobs)) {
    next_round(*c);
  }
  check_barriers();
}

void SchedulerCore::on_first_token(uint64_t id, int32_t token, float logprob,
                                   std::span<const TokenLogprob> top) {
  auto c = find(id);
  if (!c || c->phase != RequestCtx::Phase::prefill || c->first_sent || c->spec.mode == DecodeMode::full)
    return;
  c->first_sent = true;
  // A token that ends the request (its length, a stop, the callback's error) ends it
  // once the prefill is through: the chunks are published and the stats filled then.
  c->stop_after_prefill = push(*c, token, logprob, top);
}

void SchedulerCore::on_prefill_finished(const PrefillResult& r) {
  auto c = find(r.id);
  if (!c) return;
  auto& s = c->result.stats;
  s.prefill_seconds += r.seconds;
  s.prefilled_after_seconds = since(c->submitted);
  s.fast_bytes_peak = std::max(s.fast_bytes_peak, r.fast_bytes_peak);
  const bool kept = r.drafts_kept && c->cf_held;
  s.remote_predrafts_kept = kept;
  s.compressed_bytes = r.compressed_bytes;  // the view rebuilt over the whole prompt, if it was
  s.compressed_full_bytes = r.compressed_full_bytes;
  c->cf_active = c->cf_held = false;
  // With a view rebuilt over the whole prompt, its chunks the store lacked too.
  if (c->tier_held) publish_full_chunks(*c, r.views, s.remote_compressed_chunks_hit);
  if (emit(*c, r.token, r.logprob, r.top_logprobs)) return check_barriers();
  if (kept) {  // the first round takes its drafts from those made ahead
    c->ahead = std::move(c->predraft);
    c->ahead_from_ngram = std::move(c->predraft_from_ngram);
    c->ahead_seconds_per_draft = c->ahead.empty() ? 0.0 : c->predraft_seconds / double(c->ahead.size());
    verify_ahead(*c, 0, c->round_drafts);
  } else {
    c->drafts.clear();
    c->drafts_from_ngram.clear();
    next_round(*c);
  }
  c->predraft.clear();
  c->predraft_from_ngram.clear();
  check_barriers();
}

void SchedulerCore::verify_ahead(RequestCtx& c, size_t skip, size_t L) {
  c.ahead.erase(c.ahead.begin(), c.ahead.begin() + ptrdiff_t(skip));
  c.ahead_from_ngram.erase(c.ahead_from_ngram.begin(), c.ahead_from_ngram.begin() + ptrdiff_t(skip));
  const size_t k = std::min(L, c.ahead.size());
  c.round_drafts = k;
  c.drafts.assign(c.ahead.begin(), c.ahead.begin() + ptrdiff_t(k));
  c.drafts_from_ngram.assign(c.ahead_from_ngram.begin(), c.ahead_from_ngram.begin() + ptrdiff_t(k));
  c.ahead.erase(c.ahead.begin(), c.ahead.begin() + ptrdiff_t(k));
  c.ahead_from_ngram.erase(c.ahead_from_ngram.begin(), c.ahead_from_ngram.begin() + ptrdiff_t(k));
  c.round_draft_seconds = c.ahead_seconds_per_draft * double(k);
  if (skip > 0) {  // a later round: no fold statistics (folds wait for drafting to resume)
    c.wants_stats = false;
    c.hidden = nullptr;
  }
  c.result.stats.remote_predraft_rounds += 1;
  start_verify(c);
}

void SchedulerCore::on_drafted(DraftBlock& b) {
  auto c = find(b.id);
  if (!c) return;
  c->result.stats.draft_seconds += b.seconds;
  c->result.stats.fast_bytes_peak = std::max(c->result.stats.fast_bytes_peak, b.fast_bytes_peak);
  if (b.final) {
    for (size_t i = 0; i < b.tokens.size(); ++i)
      if (emit(*c, b.tokens[i], b.logprobs[i], top_at(b.top_logprobs, i))) return check_barriers();
    if (!b.more) next_round(*c);  // else the block goes on (streamed a step at a time)
    return check_barriers();
  }
  {
    auto& s = c->result.stats;
    s.drafter_passes += b.levels.drafter_passes;
    s.ngram_proposed += b.levels.ngram_proposed;
    s.ngram_confirmed += b.levels.ngram_confirmed;
    s.ngram_seconds += b.levels.ngram_seconds;
  }
  if (c->cf_predrafting) {  // compressed first: drafted from the guess; held for now
    if (c->predraft.empty()) {  // the block from the guess: its verify needs
      c->wants_stats = b.wants_stats;
      c->hidden = b.hidden;
    }
    c->predraft.insert(c->predraft.end(), b.tokens.begin(), b.tokens.end());
    c->predraft_from_ngram.insert(c->predraft_from_ngram.end(), b.proposed_by_ngram.begin(),
                                  b.proposed_by_ngram.end());
    c->predraft_from_ngram.resize(c->predraft.size(), 0);  // one flag per draft
    c->predraft_seconds += b.seconds;
    // While the full chunks are still on their way: further ahead, up to the cap.
    const size_t L = c->round_drafts;
    size_t cap = std::max(L, remote_predraft_);
    if (c->spec.fold_every > 0) cap = std::min(cap, c->spec.fold_every + L);  // the tail's bound
    cap = std::min(cap, remaining(*c) - 1);
    if (!c->cf_full_in && c->predraft.size() < cap && !b.tokens.empty()) {
      out_.draft(c->id, std::min(L, cap - c->predraft.size()), true);
      return check_barriers();
    }
    c->cf_predrafting = false;
    c->cf_held = true;
    c->result.stats.remote_predrafted = c->predraft.size();
    maybe_finish_prefill(*c);
    return check_barriers();
  }
  c->drafts = std::move(b.tokens);
  c->drafts_from_ngram = std::move(b.proposed_by_ngram);
  c->round_draft_seconds = b.seconds;
  c->wants_stats = b.wants_stats;
  c->hidden = b.hidden;
  start_verify(*c);
  check_barriers();
}

void SchedulerCore::start_verify(RequestCtx& c) {
  c.phase = RequestCtx::Phase::verify;
  const VerifyJob job{c.id, c.result.output_ids.back(), pending_position(c), c.drafts,
                      c.spec.sampling, c.wants_stats, c.hidden};
  if (lockstep_) held_for_verify_.push_back(c.id);
  else out_.verify(job);
}

void SchedulerCore::on_verified(std::shared_ptr<const VerifyOutcome> v) {
  auto c = find(v->id);
  if (!c) return;
  const size_t p0 = pending_position(*c);
  c->policy.observe(c->drafts.size(), v->accepted, c->round_draft_seconds, v->seconds);
  std::string reason;
  size_t emitted = 0;
  while (emitted < v->tokens.size() && reason.empty()) {
    reason = push(*c, v->tokens[emitted], v->logprobs[emitted], top_at(v->top_logprobs, emitted));
    ++emitted;
  }
  {
    // Accepted drafts count up to the token that stopped the request.
    auto& s = c->result.stats;
    const size_t accepted = std::min(v->accepted, emitted);
    s.rounds += 1;
    s.drafted += c->drafts.size();
    s.accepted += accepted;
    for (size_t j = 0; j < accepted && j < c->drafts_from_ngram.size(); ++j)
      s.ngram_accepted += c->drafts_from_ngram[j];
    counters_->drafted += c->drafts.size();
    counters_->accepted += accepted;
    if (s.accepted_histogram.size() <= accepted) s.accepted_histogram.resize(accepted + 1);
    s.accepted_histogram[accepted] += 1;
    s.verify_seconds += v->seconds;
    s.verify_pass_requests += v->shared_by;
  }
  if (!reason.empty()) {
    finish(*c, reason, c->callback_error);
    return check_barriers();
  }
  if (!c->ahead.empty()) {  // compressed first: drafts made ahead go on while they agree
    if (v->accepted == c->drafts.size() && c->ahead.size() > 1 && v->tokens.back() == c->ahead[0]) {
      out_.commit_drafter(v, p0, c->ahead.size());
      verify_ahead(*c, 1, c->policy.next(remaining(*c)));
      return check_barriers();
    }
    c->ahead.clear();
    c->ahead_from_ngram.clear();
  }
  out_.commit_drafter(v, p0, 0);  // before the next draft: the same mailbox keeps order
  next_round(*c);
  check_barriers();
}

void SchedulerCore::on_failed(uint64_t id, const std::string& error) {
  auto c = find(id);
  if (!c) return;
  finish(*c, "error", error);
  check_barriers();
}

void SchedulerCore::cancel(uint64_t id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if ((*it)->id == id) {
      auto c = *it;
      queue_.erase(it);
      publish_sizes();
      ++counters_->cancelled;
      c->result.finish_reason = "cancelled";
      c->result.ok = true;
      c->phase = RequestCtx::Phase::done;
      c->promise.set_value(std::move(c->result));
      return;
    }
  if (auto c = find(id)) {
    finish(*c, "cancelled");
    check_barriers();
  }
}

void SchedulerCore::cancel_all() {
  while (!queue_.empty()) cancel(queue_.front()->id);
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : active_) ids.push_back(id);
  for (uint64_t id : ids) cancel(id);
  // Results held back for a publish resolve now (the engine is going away).
  for (auto& [id, c] : publishing_)
    if (c->result_pending) {
      c->result_pending = false;
      c->promise.set_value(std::move(c->result));
    }
}

void SchedulerCore::finish(RequestCtx& c, const std::string& reason, const std::string& error) {
  auto keep = find(c.id);  // c lives in active_: hold it while erasing
  const bool prefilling = c.phase == RequestCtx::Phase::prefill;
  c.phase = RequestCtx::Phase::done;
  c.result.finish_reason = reason;
  c.result.ok = error.empty();
  c.result.error = error;
  c.result.stats.prompt_tokens = c.spec.prompt.size();
  c.result.stats.output_tokens = c.result.output_ids.size();
  c.result.stats.total_seconds = since(c.submitted);
  if (tokenizer_ != nullptr)
    c.result.text = c.stop.cut(tokenizer_->decode(c.result.output_ids, /*skip_special=*/true));
  if (!error.empty()) ++counters_->failed;
  else if (reason == "cancelled") ++counters_->cancelled;
  else ++counters_->completed;
  // A remote request's entry is the scheduler's: freed here unless a fetch or a
  // publish still uses it (their replies free it).
  out_.release(c.id, c.spec.mode == DecodeMode::vericache && !c.remote);
  for (const auto& m : c.spec.remote_meetings) (void)m->stop();  // their fetchers take nothing more
  if (!c.remote_fetching && !c.remote_publishing) free_tier(c, prefilling);
  if (c.remote_fetching) c.tier_held = false;  // on_remote_fetched frees it
  fast_reserved_ -= std::min(fast_reserved_, c.fast_need);
  tier_reserved_ -= std::min(tier_reserved_, c.tier_need);
  counters_->fast_reserved.store(fast_reserved_, std::memory_order_relaxed);
  active_.erase(c.id);
  held_for_draft_.erase(std::remove(held_for_draft_.begin(), held_for_draft_.end(), c.id),
                        held_for_draft_.end());
  held_for_verify_.erase(std::remove(held_for_verify_.begin(), held_for_verify_.end(), c.id),
                         held_for_verify_.end());
  // The gauges before the result: whoever holds the result and reads them then
  // (a client asking /metrics) finds the request gone (admit() publishes again).
  publish_sizes();
  if (c.remote_publishing) c.result_pending = true;  // its publish stats come first
  else keep->promise.set_value(std::move(c.result));
  admit();
}

void SchedulerCore::check_barriers() {
  if (!lockstep_) return;
  auto any_in = [&](RequestCtx::Phase p, const std::vector<uint64_t>& held) {
    for (const auto& [id, c] : active_)
      if (c->phase == p && std::find(held.begin(), held.end(), id) == held.end()) return true;
    return false;
  };
  if (!verifying_ && !held_for_verify_.empty() &&
      !any_in(RequestCtx::Phase::draft, {}) && !any_in(RequestCtx::Phase::prefill, {}) &&
      !any_in(RequestCtx::Phase::fetch, {})) {
    verifying_ = true;  // everyone has drafted: everyone verifies
    for (uint64_t id : std::exchange(held_for_verify_, {})) {
      auto c = find(id);
      const VerifyJob job{c->id, c->result.output_ids.back(), pending_position(*c), c->drafts,
                          c->spec.sampling, c->wants_stats, c->hidden};
      out_.verify(job);
    }
  }
  if (verifying_ && !any_in(RequestCtx::Phase::verify, {})) {
    verifying_ = false;  // everyone has verified: everyone drafts
    for (uint64_t id : std::exchange(held_for_draft_, {}))
      if (auto c = find(id)) next_round(*c);
  }
}

}  // namespace vc::actors

// The scheduler's steps around a remote request's prefill (see scheduler_core.hpp):
// its prefix fetched in segments before (full chunks; compressed first: compressed
// chunks, then the full ones while the drafter drafts), its chunks published after,
// its full-tier entry freed once nothing reads it.
#include <algorithm>

#include "actors/scheduler_core.hpp"

namespace vc::actors {

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void SchedulerCore::start_full_flow(RequestCtx& c) {
  // When idle only: the front is recomputed for a request alone in the engine (none
  // other admitted, none waiting to be); beside others the plain flow leaves the
  // cores to their decoding. Priced: when it saves this request more time than it
  // takes from the others (price_front, from the rates measured so far).
  const size_t others = active_.size() - 1 + queue_.size();
  const bool whole_chunk =
      remote_chunk_ > 0 && std::min(c.remote_limit, c.spec.prompt.size()) >= remote_chunk_;
  bool front = c.recompute_front;
  if (front && c.recompute_front_priced) {
    const FrontPrice price = price_front(others, front_rates_);
    front = price.recompute;
    c.result.stats.remote_front_price =
        price.recompute && !whole_chunk ? "the prefix is shorter than a chunk: fetch" : price.why;
  } else if (front && c.recompute_front_when_idle) {
    front = others == 0;
  }
  if (front && whole_chunk)
    start_meeting(c);
  else
    start_remote_fetch(c, c.remote_limit);
}

void SchedulerCore::start_meeting(RequestCtx& c) {
  const size_t T = remote_chunk_;
  const size_t chunks = std::min(c.remote_limit, c.spec.prompt.size()) / T;
  RankMeetings meetings;
  for (size_t r = 0; r < std::max<size_t>(c.tp_degree, 1); ++r)
    meetings.push_back(std::make_shared<BackFetchMeeting>(chunks, T));
  out_.remote_meet(c.id, c.spec.prompt, chunks * T, meetings);
  c.tier_held = c.meeting_started = true;
  c.spec.tier_ready = true;  // created by the drafter for the scheduler (DraftSpec::remote_meetings)
  c.spec.remote_cached = 0;
  c.spec.remote_meetings = std::move(meetings);
  start_prefill(c);
}

void SchedulerCore::start_remote_fetch(RequestCtx& c, size_t max_positions) {
  c.remote_fetching = c.tier_held = true;
  const size_t T = std::max<size_t>(remote_chunk_, 1);
  c.remote_fetch_end = std::min(max_positions, c.spec.prompt.size()) / T * T;
  fetch_segment(c, 0);
}

size_t SchedulerCore::segment_end(size_t from, size_t end) const {
  return remote_segment_ == 0 ? end : std::min(end, from + remote_segment_ * remote_chunk_);
}

void SchedulerCore::fetch_segment(RequestCtx& c, size_t from) {
  const size_t end = c.remote_segment_end = segment_end(from, c.remote_fetch_end);
  out_.remote_fetch(c.id, c.spec.prompt, from, end,
                    from == 0 ? c.spec.prompt.size() + c.spec.max_new_tokens : 0);
}

void SchedulerCore::fetch_compressed_segment(RequestCtx& c, size_t from) {
  const size_t end = c.cf_segment_end = segment_end(from, c.cf_fetch_end);
  out_.remote_fetch_compressed(c.id, c.spec.prompt, from, end, c.view_spec, c.cf_joined,
                               std::max(c.cf_suffix_allowance, c.cf_suffix_limit));
}

void SchedulerCore::on_remote_compressed_fetched(uint64_t id, RankViews joined,
                                                 const RemoteCompressedFetch& f) {
  auto c = find(id);
  if (!c) return;  // cancelled meanwhile: it holds nothing yet
  auto& s = c->result.stats;
  s.remote_compressed_chunks_hit += f.chunks;
  s.remote_bytes_compressed += f.bytes;
  s.remote_compressed_fetch_seconds += f.seconds;
  s.remote_compressed_stop_reason = f.stop_reason;
  c->cf_joined = std::move(joined);  // everything so far, joined by the net_fetcher
  if (f.chunks > 0 && f.stop_reason.empty() && f.positions == c->cf_segment_end &&
      c->cf_segment_end < c->cf_fetch_end) {  // whole, short of the end: the next one
    fetch_compressed_segment(*c, f.positions);
    return check_barriers();
  }
  RankViews views = std::move(c->cf_joined);
  c->cf_joined.clear();
  s.remote_compressed_positions = views.empty() || !views.front() ? 0 : views.front()->covered();
  const size_t n = c->spec.prompt.size();
  // Each rank's view in its own fast memory: within the view bound, and its suffix
  // within the reservation (grown for a longer suffix when the budget has room).
  bool fits = !views.empty();
  for (const auto& view : views) fits = fits && view && view->held_bytes() <= c->cf_view_allowance;
  if (fits) grow_suffix_reservation(*c, n - views.front()->covered());
  for (const auto& view : views) fits = fits && n - view->covered() <= c->cf_suffix_allowance;
  if (!fits) {
    if (!views.empty() && views.front()) {
      const auto& view = views.front();
      s.remote_compressed_stop_reason =
          "the fetched view of " + std::to_string(view->covered()) + " positions (" +
          std::to_string(view->held_bytes()) + " bytes) and its suffix of " +
          std::to_string(n - view->covered()) +
          " positions do not fit the fast memory reserved for the request: full flow";
    }
    views.clear();
  }
  if (views.empty()) {  // the full flow, as without compressed first
    start_full_flow(*c);
    return check_barriers();
  }
  c->cf_active = true;
  s.remote_compressed_first = true;
  c->spec.fetched_views = std::move(views);
  c->spec.copy_view = false;  // its chunks came from the store
  if (c->spec.mode == DecodeMode::vericache) {
    // The full chunks stream into the tier while the drafter works over the view;
    // nothing of them limits the statistics (the view is the store's), unless
    // complete chunks lie past the view: then the exact prefill rebuilds the view
    // over the whole prompt, to publish them, and computes the statistics window.
    const size_t covered = c->spec.fetched_views.front()->covered();
    const bool rebuild = n / remote_chunk_ * remote_chunk_ > covered;
    c->spec.publish_chunk_tokens = rebuild ? remote_chunk_ : 0;
    c->spec.tier_ready = true;
    start_remote_fetch(*c, rebuild ? c->remote_limit : n - 1);
  }
  start_prefill(*c);
  check_barriers();
}

void SchedulerCore::grow_suffix_reservation(RequestCtx& c, size_t suffix) {
  if (suffix <= c.cf_suffix_allowance || suffix > c.cf_suffix_limit || !c.cf_suffix_bytes) return;
  const size_t grow = c.cf_suffix_bytes(suffix) - c.cf_suffix_bytes(c.cf_suffix_allowance);
  if (fast_budget_ > 0 && fast_reserved_ + grow > fast_budget_) return;  // the full flow
  c.fast_need += grow;
  fast_reserved_ += grow;
  counters_->fast_reserved.store(fast_reserved_, std::memory_order_relaxed);
  c.result.stats.fast_bytes_reserved = c.fast_need;
  c.cf_suffix_allowance = suffix;
}

void SchedulerCore::maybe_finish_prefill(RequestCtx& c) {
  if (!c.cf_active || c.cf_finishing || !c.cf_guessed || c.cf_predrafting) return;
  if (!c.cf_full_in) {  // the drafter waits for the full chunks from now on
    if (!c.cf_idle_since) c.cf_idle_since = std::chrono::steady_clock::now();
    return;
  }
  if (c.cf_idle_since) c.result.stats.remote_full_wait_seconds = since(*c.cf_idle_since);
  c.cf_finishing = true;
  out_.finish_prefill(c.id, c.spec.remote_cached);
}

void SchedulerCore::publish_full_chunks(RequestCtx& c, RankViews views, size_t first_view_chunk) {
  // remote: publish the complete chunks the store lacked, and the views' chunks
  const size_t first = c.publish_from ? *c.publish_from : c.spec.remote_cached / remote_chunk_;
  const size_t complete = c.spec.prompt.size() / remote_chunk_;
  const bool with_view = !views.empty() && complete > first_view_chunk;
  if (complete > first || with_view) {
    c.remote_publishing = true;
    publishing_[c.id] = find(c.id);
    out_.remote_publish(c.id, c.spec.prompt, first, with_view ? std::move(views) : RankViews{},
                        c.view_spec.empty() ? compressor_spec(c.spec.compressor, c.spec.compressor_params,
                                                              c.spec.ratio)
                                            : c.view_spec,
                        first_view_chunk, c.publish_skip_held);
  } else if (c.spec.mode == DecodeMode::lossy) {
    free_tier(c);
  }
}

void SchedulerCore::note_meeting(RequestCtx& c, const MetPrefix& met) {
  const size_t T = remote_chunk_;
  auto& s = c.result.stats;
  s.remote_recompute_front = true;
  s.remote_front_recomputed = met.front_chunks * T;
  s.remote_chunks_hit = met.fetched_chunks;
  s.remote_positions = met.fetched_chunks * T;
  s.remote_bytes_fetched = met.run.bytes;
  s.remote_fetch_seconds = met.run.seconds;
  s.remote_stop_reason = met.run.stop_reason;
  s.remote_fetch_segments = 1;
  c.spec.remote_cached = met.cached_chunks() * T;
  c.spec.remote_meetings.clear();  // the runs' values go with the drafter's copy
  c.publish_from = met.publish_from;
  c.publish_skip_held = !met.publish_known;
}

void SchedulerCore::free_tier(RequestCtx& c, bool prefilling) {
  if (!c.tier_held) return;
  c.tier_held = false;
  out_.release_tier(c.id, c.meeting_started || prefilling);
}

void SchedulerCore::on_remote_fetched(uint64_t id, const RemoteFetch& f, const std::string& error) {
  auto c = find(id);
  if (!c) {  // finished (cancelled) while its prefix was fetched: free what arrived
    out_.release_tier(id, false);
    return;
  }
  if (!error.empty()) {
    c->remote_fetching = false;
    finish(*c, "error", "remote prefix cache: " + error);
    return check_barriers();
  }
  auto& s = c->result.stats;
  front_rates_.add_fetch(f.chunks * remote_chunk_, f.seconds);
  s.remote_chunks_hit += f.chunks;
  s.remote_positions = f.positions;
  s.remote_bytes_fetched += f.bytes_full;
  s.remote_fetch_seconds += f.seconds;
  s.remote_stop_reason = f.stop_reason;
  s.remote_fetch_segments += 1;
  // A segment that came back whole, short of the end: the next one (behind any
  // other request's fetch that waits for this net_fetcher).
  if (f.stop_reason.empty() && f.positions == c->remote_segment_end &&
      c->remote_segment_end < c->remote_fetch_end) {
    fetch_segment(*c, f.positions);
    return check_barriers();
  }
  c->remote_fetching = false;
  c->spec.tier_ready = true;
  c->spec.remote_cached = f.positions;
  if (c->cf_active) {  // the drafter works from the fetched view meanwhile
    c->cf_full_in = true;
    maybe_finish_prefill(*c);
  } else {
    start_prefill(*c);
  }
  check_barriers();
}

void SchedulerCore::on_remote_published(uint64_t id, size_t chunks, size_t compressed_chunks) {
  auto it = publishing_.find(id);
  if (it == publishing_.end()) return;
  auto c = std::move(it->second);
  publishing_.erase(it);
  c->remote_publishing = false;
  c->result.stats.remote_chunks_published = chunks;
  c->result.stats.remote_compressed_chunks_published = compressed_chunks;
  // lossy decodes from its view alone: the entry goes as soon as it is copied.
  if (c->phase == RequestCtx::Phase::done || c->spec.mode == DecodeMode::lossy) free_tier(*c);
  if (c->result_pending) {
    c->result_pending = false;
    c->promise.set_value(std::move(c->result));
  }
}

}  // namespace vc::actors

// Scheduler actor: forwards its mailbox to SchedulerCore and turns the core's
// Outbox calls into sends to the worker actors.
#include "actors/scheduler.hpp"

#include <algorithm>

#include "actors/protocol.hpp"

namespace vc::actors {

void ActorOutbox::prefill(const DraftSpec& spec) { self_->send(w_.drafter, prefill_msg{spec}); }
void ActorOutbox::draft(uint64_t id, size_t n, bool ahead) {
  self_->send(w_.drafter, draft_msg{id, n, ahead});
}
void ActorOutbox::verify(const VerifyJob& job) { self_->send(w_.verifier, verify_msg{job}); }
void ActorOutbox::commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0, size_t ahead) {
  self_->send(w_.drafter, commit_msg{std::move(v), p0, ahead});
}
void ActorOutbox::release(uint64_t id, bool full_tier) {
  self_->send(w_.drafter, release_msg{id});
  // Through the drafter: after a prefill of the request in flight there stops
  // (it writes the entry), then the mover's pending commits.
  if (full_tier && w_.mover) self_->send(w_.drafter, release_tier_msg{id, w_.mover});
}
size_t ActorOutbox::take_fetcher() {
  const size_t f =
      size_t(std::min_element(outstanding_.begin(), outstanding_.end()) - outstanding_.begin());
  if (outstanding_[f]++ == 0 && counters_) {  // the scheduler thread is the only writer
    const size_t busy = ++counters_->fetchers_busy;
    if (busy > counters_->fetchers_busy_peak.load(std::memory_order_relaxed))
      counters_->fetchers_busy_peak.store(busy, std::memory_order_relaxed);
  }
  return f;
}
void ActorOutbox::release_fetcher(size_t f) {
  if (--outstanding_[f] == 0 && counters_) --counters_->fetchers_busy;
}
void ActorOutbox::remote_fetch(uint64_t id, const std::vector<int32_t>& prompt, size_t from_positions,
                               size_t max_positions, size_t create_positions) {
  SchedulerCore* core = core_;
  const size_t f = take_fetcher();
  // Asynchronous: the scheduler goes on while the net_fetcher waits for the store.
  self_->request(w_.net_fetchers[f], caf::infinite,
                 remote_fetch_msg{id, prompt, from_positions, max_positions, tier_, create_positions})
      .then([this, core, f](remote_fetched_msg& m) {
              release_fetcher(f);
              core->on_remote_fetched(m.id, m.fetch, m.error);
            },
            [this, core, f, id](caf::error& e) {
              release_fetcher(f);
              core->on_remote_fetched(id, RemoteFetch{}, "net_fetcher: " + to_string(e));
            });
}
void ActorOutbox::remote_publish(uint64_t id, const std::vector<int32_t>& prompt,
                                 size_t first_chunk, RankViews views,
                                 const std::string& view_spec, size_t first_view_chunk, bool skip_held) {
  SchedulerCore* core = core_;
  const size_t f = take_fetcher();
  self_->request(w_.net_fetchers[f], caf::infinite,
                 remote_publish_msg{id, prompt, first_chunk, tier_, std::move(views), view_spec,
                                    first_view_chunk, skip_held})
      .then([this, core, f, id](remote_published_msg& m) {
              release_fetcher(f);
              core->on_remote_published(id, m.chunks, m.compressed_chunks);
            },
            [this, core, f, id](caf::error&) {
              release_fetcher(f);
              core->on_remote_published(id, 0);
            });
}
void ActorOutbox::remote_fetch_compressed(uint64_t id, const std::vector<int32_t>& prompt,
                                          size_t from_positions, size_t max_positions,
                                          const std::string& view_spec, RankViews base,
                                          size_t max_suffix) {
  SchedulerCore* core = core_;
  const size_t f = take_fetcher();
  self_->request(w_.net_fetchers[f], caf::infinite,
                 remote_fetch_compressed_msg{id, prompt, from_positions, max_positions, view_spec,
                                             std::move(base), max_suffix})
      .then([this, core, f](remote_compressed_fetched_msg& m) {
              release_fetcher(f);
              core->on_remote_compressed_fetched(m.id, std::move(m.views), m.fetch);
            },
            [this, core, f, id](caf::error& e) {
              release_fetcher(f);
              RemoteCompressedFetch none;
              none.stop_reason = "net_fetcher: " + to_string(e);
              core->on_remote_compressed_fetched(id, {}, none);
            });
}
void ActorOutbox::remote_meet(uint64_t id, const std::vector<int32_t>& prompt, size_t max_positions,
                              RankMeetings meetings) {
  const size_t f = take_fetcher();
  self_->request(w_.net_fetchers[f], caf::infinite, remote_fetch_back_msg{id, prompt, max_positions, meetings})
      .then([this, f](bool) { release_fetcher(f); },
            [this, f, meetings](caf::error& e) {
              release_fetcher(f);
              for (const auto& m : meetings) {  // the fronts compute what they were not handed
                RemoteBackFetch none;
                none.stop_reason = "net_fetcher: " + to_string(e);
                m->deliver(std::move(none));
              }
            });
}
void ActorOutbox::finish_prefill(uint64_t id, size_t cached) {
  self_->send(w_.drafter, finish_prefill_msg{id, cached});
}
void ActorOutbox::release_tier(uint64_t id, bool after_drafter) {
  if (!w_.mover) return;
  if (after_drafter)  // the drafter made the entry: after that prefill, then the mover's commits
    self_->send(w_.drafter, release_tier_msg{id, w_.mover});
  else
    self_->send(w_.mover, release_msg{id});  // after its pending commits
}

caf::behavior scheduler(caf::stateful_actor<SchedulerState>* self, size_t max_active,
                        size_t max_queue, bool lockstep, const Tokenizer* tokenizer,
                        std::shared_ptr<LiveCounters> counters, size_t fast_budget,
                        size_t tier_budget, FullTier* tier, size_t remote_chunk_tokens,
                        size_t remote_predraft, size_t remote_fetch_segment) {
  self->state.out = std::make_unique<ActorOutbox>(self, tier);
  self->state.core = std::make_unique<SchedulerCore>(*self->state.out, max_active, max_queue,
                                                     lockstep, tokenizer, counters);
  self->state.out->set_core(self->state.core.get());
  self->state.out->set_counters(counters);
  self->state.core->set_remote_chunk_tokens(remote_chunk_tokens);
  self->state.core->set_remote_predraft(remote_predraft);
  self->state.core->set_remote_fetch_segment(remote_fetch_segment);
  self->state.core->set_fast_budget(fast_budget);
  self->state.core->set_tier_budget(tier_budget);
  auto& core = *self->state.core;
  return {
      [self](wire_msg& w) { self->state.out->wire(w); },
      [&core](submit_msg& m) { core.submit(std::move(m.ctx)); },
      [&core](cancel_msg& m) { core.cancel(m.id); },
      [&core](prefilled_msg& m) { core.on_prefilled(m.result); },
      [&core](first_token_msg& m) { core.on_first_token(m.id, m.token, m.logprob, m.top_logprobs); },
      [&core](prefill_finished_msg& m) { core.on_prefill_finished(m.result); },
      [&core](drafted_msg& m) { core.on_drafted(m.block); },
      [&core](verified_msg& m) { core.on_verified(std::move(m.outcome)); },
      [&core](failed_msg& m) { core.on_failed(m.id, m.error); },
      [self, &core](shutdown_msg&) {
        // Every request still in flight resolves as cancelled; the worker handles
        // are dropped so that the actor system can end.
        core.cancel_all();
        self->state.out->clear();
        return true;
      },
  };
}

}  // namespace vc::actors

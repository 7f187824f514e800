// Scheduler actor: forwards its mailbox to SchedulerCore and turns the core's
// Outbox calls into sends to the worker actors.
#include "actors/scheduler.hpp"

#include "actors/protocol.hpp"

namespace vc::actors {

void ActorOutbox::prefill(const DraftSpec& spec) { self_->send(w_.drafter, prefill_msg{spec}); }
void ActorOutbox::draft(uint64_t id, size_t n) { self_->send(w_.drafter, draft_msg{id, n}); }
void ActorOutbox::verify(const VerifyJob& job) { self_->send(w_.verifier, verify_msg{job}); }
void ActorOutbox::commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0) {
  self_->send(w_.drafter, commit_msg{std::move(v), p0});
}
void ActorOutbox::release(uint64_t id, bool full_tier) {
  self_->send(w_.drafter, release_msg{id});
  if (full_tier) self_->send(w_.mover, release_msg{id});
}

caf::behavior scheduler(caf::stateful_actor<SchedulerState>* self, size_t max_active,
                        size_t max_queue, bool lockstep, const Tokenizer* tokenizer,
                        std::shared_ptr<LiveCounters> counters, size_t fast_budget,
                        size_t tier_budget) {
  self->state.out = std::make_unique<ActorOutbox>(self);
  self->state.core = std::make_unique<SchedulerCore>(*self->state.out, max_active, max_queue,
                                                     lockstep, tokenizer, std::move(counters));
  self->state.core->set_fast_budget(fast_budget);
  self->state.core->set_tier_budget(tier_budget);
  auto& core = *self->state.core;
  return {
      [self](wire_msg& w) { self->state.out->wire(w); },
      [&core](submit_msg& m) { core.submit(std::move(m.ctx)); },
      [&core](cancel_msg& m) { core.cancel(m.id); },
      [&core](prefilled_msg& m) { core.on_prefilled(m.result); },
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

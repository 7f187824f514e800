// The scheduler actor: a thin behavior over SchedulerCore, whose Outbox calls
// become sends to the worker actors.
#pragma once
#include <memory>

#include <caf/all.hpp>

#include "actors/protocol.hpp"
#include "actors/scheduler_core.hpp"

namespace vc::actors {

/// Outbox over mailbox sends to the wired worker actors.
class ActorOutbox final : public Outbox {
 public:
  explicit ActorOutbox(caf::event_based_actor* self) : self_(self) {}
  void wire(const wire_msg& w) { w_ = w; }
  /// Drops the worker handles (shutdown).
  void clear() { w_ = wire_msg{}; }
  void prefill(const DraftSpec& spec) override;
  void draft(uint64_t id, size_t n) override;
  void verify(const VerifyJob& job) override;
  void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0) override;
  void release(uint64_t id, bool full_tier) override;

 private:
  caf::event_based_actor* self_;
  wire_msg w_;
};

struct SchedulerState {
  std::unique_ptr<ActorOutbox> out;
  std::unique_ptr<SchedulerCore> core;
};

/// Handles wire_msg (once), submit_msg, cancel_msg, prefilled_msg, drafted_msg,
/// verified_msg, failed_msg and shutdown_msg (cancels everything still in flight).
/// Its counts go to `counters`, which any thread reads without a message.
/// fast_budget, tier_budget: bytes that admitted requests' fast-memory and full-tier
/// needs must fit in (0: any).
caf::behavior scheduler(caf::stateful_actor<SchedulerState>* self, size_t max_active,
                        size_t max_queue, bool lockstep, const Tokenizer* tokenizer,
                        std::shared_ptr<LiveCounters> counters, size_t fast_budget = 0,
                        size_t tier_budget = 0);

}  // namespace vc::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<vc::actors::LiveCounters>)

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
  /// `tier`: the full tier the net_fetcher fills and publishes from (may be null
  /// without a remote store).
  ActorOutbox(caf::event_based_actor* self, FullTier* tier) : self_(self), tier_(tier) {}
  /// Where the net_fetcher's replies go.
  void set_core(SchedulerCore* core) { core_ = core; }
  /// Where the net_fetchers' busy counts go.
  void set_counters(std::shared_ptr<LiveCounters> c) { counters_ = std::move(c); }
  void wire(const wire_msg& w) {
    w_ = w;
    outstanding_.assign(w.net_fetchers.size(), 0);
  }
  /// Drops the worker handles (shutdown).
  void clear() { w_ = wire_msg{}; }
  void prefill(const DraftSpec& spec) override;
  void draft(uint64_t id, size_t n, bool ahead) override;
  void verify(const VerifyJob& job) override;
  void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0, size_t ahead) override;
  void release(uint64_t id, bool full_tier) override;
  void remote_fetch(uint64_t id, const std::vector<int32_t>& prompt, size_t from_positions,
                    size_t max_positions, size_t create_positions) override;
  void remote_publish(uint64_t id, const std::vector<int32_t>& prompt, size_t first_chunk,
                      RankViews views, const std::string& view_spec,
                      size_t first_view_chunk, bool skip_held) override;
  void remote_meet(uint64_t id, const std::vector<int32_t>& prompt, size_t max_positions,
                   RankMeetings meetings) override;
  void release_tier(uint64_t id, bool after_drafter) override;
  void remote_fetch_compressed(uint64_t id, const std::vector<int32_t>& prompt, size_t from_positions,
                               size_t max_positions, const std::string& view_spec,
                               RankViews base, size_t max_suffix) override;
  void finish_prefill(uint64_t id, size_t cached) override;

 private:
  caf::event_based_actor* self_;
  FullTier* tier_;
  SchedulerCore* core_ = nullptr;
  std::shared_ptr<LiveCounters> counters_;
  wire_msg w_;
  std::vector<size_t> outstanding_;  // per net_fetcher: requests sent, not yet answered
  /// The net_fetcher with the fewest outstanding (the first of equals), counted busy.
  size_t take_fetcher();
  void release_fetcher(size_t f);
};

struct SchedulerState {
  std::unique_ptr<ActorOutbox> out;
  std::unique_ptr<SchedulerCore> core;
};

/// Handles wire_msg (once), submit_msg, cancel_msg, prefilled_msg,
/// prefill_finished_msg, drafted_msg,
/// verified_msg, failed_msg and shutdown_msg (cancels everything still in flight),
/// and the net_fetcher's replies. `tier`, remote_chunk_tokens: the full tier and the
/// remote store's chunk size, when a store is configured (else null and 0);
/// remote_predraft, remote_fetch_segment: SchedulerCore::set_remote_predraft and
/// set_remote_fetch_segment.
/// Its counts go to `counters`, which any thread reads without a message.
/// fast_budget, tier_budget: bytes that admitted requests' fast-memory and full-tier
/// needs must fit in (0: any).
caf::behavior scheduler(caf::stateful_actor<SchedulerState>* self, size_t max_active,
                        size_t max_queue, bool lockstep, const Tokenizer* tokenizer,
                        std::shared_ptr<LiveCounters> counters, size_t fast_budget = 0,
                        size_t tier_budget = 0, FullTier* tier = nullptr,
                        size_t remote_chunk_tokens = 0, size_t remote_predraft = 0,
                        size_t remote_fetch_segment = 0);

}  // namespace vc::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<vc::actors::LiveCounters>)

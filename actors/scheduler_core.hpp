// The scheduler's logic as a plain object: admission with a bounded queue, each
// request's state machine (queued -> prefill -> draft <-> verify -> done), the draft
// length policy, lock-step barriers, and emission with the shared stop rule. It
// talks to the workers through an Outbox, which the scheduler actor implements
// with mailbox sends and tests implement with plain vectors.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/vericache/engine.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/stop_rule.hpp"
#include "runtime/verifier.hpp"

namespace vc::actors {

/// One request as the scheduler tracks it; shared with the client's submit call.
struct RequestCtx {
  enum class Phase { queued, prefill, draft, verify, done };
  uint64_t id = 0;
  DraftSpec spec;
  StopRule stop;
  DraftLengthPolicy policy = DraftLengthPolicy::fixed(16);
  vericache::TokenDetailCallback on_token;
  std::promise<vericache::Result> promise;
  vericache::Result result;
  Phase phase = Phase::queued;
  size_t round_drafts = 0;       // L of the round in flight
  std::vector<int32_t> drafts;   // the round's drafts, once drafted
  std::vector<uint8_t> drafts_from_ngram;  // per draft: an n-gram proposal (draft_pass.hpp)
  double round_draft_seconds = 0;
  bool wants_stats = false;      // the round's verify gathers statistics for a fold
  std::shared_ptr<const HiddenScorer> hidden = nullptr;  // the round's verify scores hidden states (KVzap)
  size_t fast_need = 0;          // fast-memory bytes reserved for it while active
  size_t tier_need = 0;          // full-tier bytes reserved for it while active
  std::chrono::steady_clock::time_point submitted, started;
};

/// What the scheduler asks the workers to do.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void prefill(const DraftSpec& spec) = 0;
  virtual void draft(uint64_t id, size_t n) = 0;
  virtual void verify(const VerifyJob& job) = 0;
  /// The drafter puts verified KV over its drafts (sent before the next draft).
  virtual void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0) = 0;
  virtual void release(uint64_t id, bool full_tier) = 0;
};

/// Requests by outcome and tokens emitted: a snapshot.
struct SchedulerCounters {
  size_t submitted = 0, completed = 0, failed = 0, cancelled = 0, rejected = 0, tokens = 0;
  size_t running = 0, waiting = 0;           // requests active / queued now
  size_t prompt_tokens = 0;                  // prompts of admitted requests
  size_t drafted = 0, accepted = 0;          // draft tokens verified, and accepted
};

/// The live counters: written by the scheduler thread only, read from any thread
/// without a message to the scheduler (Engine::stats(), even from a token callback,
/// which runs on the scheduler thread). Each count is exact; a snapshot taken while
/// the scheduler runs may mix counts from either side of one event.
struct LiveCounters {
  std::atomic<size_t> submitted{0}, completed{0}, failed{0}, cancelled{0}, rejected{0}, tokens{0};
  std::atomic<size_t> fast_reserved{0};  // bytes admission reserved for active requests
  std::atomic<size_t> running{0}, waiting{0}, prompt_tokens{0}, drafted{0}, accepted{0};
  [[nodiscard]] SchedulerCounters snapshot() const {
    constexpr auto r = std::memory_order_relaxed;
    return {submitted.load(r), completed.load(r), failed.load(r),
            cancelled.load(r), rejected.load(r), tokens.load(r),
            running.load(r),   waiting.load(r),   prompt_tokens.load(r),
            drafted.load(r),   accepted.load(r)};
  }
};

class SchedulerCore {
 public:
  /// `counters`: where the counts go (shared with readers on other threads);
  /// null: the core keeps its own.
  SchedulerCore(Outbox& out, size_t max_active, size_t max_queue, bool lockstep,
                const Tokenizer* tokenizer, std::shared_ptr<LiveCounters> counters = nullptr);
  /// Admission by memory: requests whose fast_need is reserved while they are
  /// active fit in `bytes` (0: no limit); the queue's head waits until they do
  /// (FIFO, so no request starves).
  void set_fast_budget(size_t bytes) { fast_budget_ = bytes; }
  /// The same for the full tier's budget and tier_need (0: no limit).
  void set_tier_budget(size_t bytes) { tier_budget_ = bytes; }
  /// Fast-memory bytes reserved by active requests.
  [[nodiscard]] size_t fast_reserved() const { return fast_reserved_; }

  void submit(std::shared_ptr<RequestCtx> ctx);
  void cancel(uint64_t id);
  void on_prefilled(const PrefillResult& r);
  void on_drafted(DraftBlock& b);
  void on_verified(std::shared_ptr<const VerifyOutcome> v);
  void on_failed(uint64_t id, const std::string& error);
  /// Cancels everything (engine shutdown).
  void cancel_all();

  [[nodiscard]] SchedulerCounters counters() const { return counters_->snapshot(); }
  [[nodiscard]] size_t active() const { return active_.size(); }
  [[nodiscard]] size_t queued() const { return queue_.size(); }

 private:
  std::shared_ptr<RequestCtx> find(uint64_t id) const;
  void admit();
  void publish_sizes();  // running/waiting gauges from active_ and queue_
  void next_round(RequestCtx& c);
  /// true: stop (finished). `top`: the token's top-N list (empty when not asked for).
  bool emit(RequestCtx& c, int32_t tok, float logprob, std::span<const TokenLogprob> top);
  /// Appends a token and calls back; returns the stop reason ("" to go on).
  std::string push(RequestCtx& c, int32_t tok, float logprob, std::span<const TokenLogprob> top);
  void finish(RequestCtx& c, const std::string& reason, const std::string& error = "");
  void check_barriers();
  [[nodiscard]] size_t remaining(const RequestCtx& c) const;
  [[nodiscard]] size_t pending_position(const RequestCtx& c) const;

  Outbox& out_;
  size_t max_active_, max_queue_;
  size_t fast_budget_ = 0, fast_reserved_ = 0;
  size_t tier_budget_ = 0, tier_reserved_ = 0;
  [[nodiscard]] bool fits(const RequestCtx& c) const {
    return (fast_budget_ == 0 || fast_reserved_ + c.fast_need <= fast_budget_) &&
           (tier_budget_ == 0 || tier_reserved_ + c.tier_need <= tier_budget_);
  }
  bool lockstep_;
  const Tokenizer* tokenizer_;
  std::deque<std::shared_ptr<RequestCtx>> queue_;
  std::unordered_map<uint64_t, std::shared_ptr<RequestCtx>> active_;
  // Lock-step only: requests waiting at the draft or the verify barrier.
  bool verifying_ = false;
  std::vector<uint64_t> held_for_draft_, held_for_verify_;
  std::shared_ptr<LiveCounters> counters_;
};

}  // namespace vc::actors

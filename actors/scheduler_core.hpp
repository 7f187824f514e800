// The scheduler's logic as a plain object: admission with a bounded queue, each
// request's state machine (queued -> prefill -> draft <-> verify -> done), the draft
// length policy, lock-step barriers, emission with the shared stop rule, and the
// remote prefix cache's steps around prefill (fetch before, publish after). It
// talks to the workers through an Outbox, which the scheduler actor implements
// with mailbox sends and tests implement with plain vectors.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/front_price.hpp"
#include "actors/vericache/engine.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/stop_rule.hpp"
#include "runtime/verifier.hpp"

namespace vc::actors {

/// One request as the scheduler tracks it; shared with the client's submit call.
struct RequestCtx {
  enum class Phase { queued, fetch, prefill, draft, verify, done };
  uint64_t id = 0;
  DraftSpec spec;
  StopRule stop;
  DraftLengthPolicy policy = DraftLengthPolicy::fixed(16);
  vericache::TokenDetailCallback on_token;
  std::string callback_error;  // what on_token threw: the request ends with it as its error
  bool first_sent = false;     // the first token went out before prefilled_msg (first_token_msg)
  std::string stop_after_prefill;  // that token ended the request: finished once the prefill is through
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
  // Remote prefix cache (lossy and vericache with a store configured): before
  // prefill its full-tier entry is created and filled with the longest cached
  // prefix (at most remote_limit positions) by the net_fetcher; after prefill the
  // chunks the store lacked are published from it. The scheduler owns that entry
  // then (the drafter neither creates nor frees it) and frees it once nothing reads
  // it: after the publish for lossy, at the end (and after the publish) otherwise.
  bool remote = false;           // set at submit: a store is configured, not full mode
  size_t remote_limit = 0;
  size_t remote_fetch_end = 0;   // the fetch in segments stops here (whole chunks)
  size_t remote_segment_end = 0; // and the segment in flight here
  bool remote_fetching = false, remote_publishing = false;
  bool tier_held = false;        // the scheduler still has the entry to free
  bool result_pending = false;   // finished while its publish was being queued
  /// Recompute front (set at submit with `remote`, EngineConfig::remote_recompute_front
  /// at degree 1): the full flow fetches from the back while the drafter prefills
  /// from the front (DraftSpec::remote_meetings), instead of fetching first.
  bool recompute_front = false;
  /// EngineConfig::remote_recompute_front_when_idle: only when no other request is
  /// admitted as the full flow starts.
  bool recompute_front_when_idle = false;
  /// EngineConfig::remote_recompute_front_priced: when the time it saves this request
  /// exceeds the time it takes from the others (price_front).
  bool recompute_front_priced = false;
  bool meeting_started = false;  // it did: the drafter created the entry (for the scheduler)
  size_t tp_degree = 1;          // the engine's: one meeting per rank
  /// The first chunk the store may lack, when the prefill says (recompute front);
  /// else remote_cached's chunks are the store's. publish_skip_held: the prefill
  /// could not say (publish from publish_from, past what the store holds).
  std::optional<size_t> publish_from;
  bool publish_skip_held = false;
  // Compressed first (set at submit with `remote`, for a method that does not score
  // hidden states): the store is asked for the prompt's compressed chunks first; with
  // a hit the drafter prefills the suffix over the fetched view (no full tier), and
  // in vericache mode the full chunks are fetched meanwhile, the drafter drafts one
  // block from its guess of the first token while they are on their way, and the
  // exact prefill of the rest (finish_prefill) gives the first token once they are
  // in; the held drafts are verified when the guess was that token. Without a hit,
  // or when the fetched view and suffix would not fit the fast memory reserved, the
  // full flow runs.
  bool compressed_first = false;
  std::string view_spec;          // compressor_spec() of its method: the chunks' keys
  // The compressed chunks come in segments too (SchedulerCore::set_remote_fetch_segment),
  // each joined onto the views before by the net_fetcher (join_segment): per rank,
  // the views so far, sent with the next segment's fetch.
  RankViews cf_joined;
  size_t cf_fetch_end = 0, cf_segment_end = 0;
  size_t cf_view_allowance = 0;   // bytes of a fetched view its reservation covers
  size_t cf_suffix_allowance = 0; // suffix positions [C, n) its reservation covers
  // A longer suffix (up to cf_suffix_limit positions) grows the reservation by
  // cf_suffix_bytes(suffix) - cf_suffix_bytes(allowance) when the budget has room
  // then; else the full flow.
  size_t cf_suffix_limit = 0;
  std::function<size_t(size_t positions)> cf_suffix_bytes;
  bool cf_active = false;         // drafting from a fetched view, first token not exact yet
  bool cf_guessed = false;        // the drafter's guess is in (prefilled over the view)
  bool cf_full_in = false;        // the full chunks are in the tier
  bool cf_predrafting = false;    // a block from the guess (or ahead of it) is being drafted
  bool cf_held = false;           // those drafts wait for the exact first token
  // Drafts made from the guess while the full chunks arrive: one block, then blocks
  // further ahead up to SchedulerCore::set_remote_predraft's cap; once the guess
  // proves right, rounds take their drafts from them (`ahead`, past the round in
  // flight) while the verifier accepts every draft and its next token is the next
  // one ahead.
  std::vector<int32_t> predraft;
  std::vector<uint8_t> predraft_from_ngram;
  double predraft_seconds = 0;
  std::vector<int32_t> ahead;
  std::vector<uint8_t> ahead_from_ngram;
  double ahead_seconds_per_draft = 0;  // the drafting time the policy sees for their rounds
  bool cf_finishing = false;      // finish_prefill was sent
  /// When the drafter had nothing left to do before the exact prefill (its guess in,
  /// its block done) while the full chunks were still on their way.
  std::optional<std::chrono::steady_clock::time_point> cf_idle_since;
};

/// What the scheduler asks the workers to do.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void prefill(const DraftSpec& spec) = 0;
  /// `ahead`: compressed first, before the exact first token: continue past the
  /// drafts made so far (DraftBatcher::start).
  virtual void draft(uint64_t id, size_t n, bool ahead) = 0;
  virtual void verify(const VerifyJob& job) = 0;
  /// The drafter puts verified KV over its drafts (sent before the next draft);
  /// `ahead` > 0: drafts made ahead past the round go on (DraftBatcher::commit).
  virtual void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0, size_t ahead) = 0;
  virtual void release(uint64_t id, bool full_tier) = 0;
  /// Remote prefix cache: append to request `id`'s full-tier entry (which holds
  /// `from_positions`; created with room for `create_positions` when that is > 0)
  /// the longest cached prefix of `prompt`, at most `max_positions`; answered
  /// through SchedulerCore::on_remote_fetched.
  virtual void remote_fetch(uint64_t id, const std::vector<int32_t>& prompt, size_t from_positions,
                            size_t max_positions, size_t create_positions) = 0;
  /// Queue for write-behind publishing the prompt's full chunks from `first_chunk`
  /// on (with `skip_held`: past those the store holds from the first, counted) and, with `views` (one per rank), its compressed chunks from
  /// `first_view_chunk` on (keyed by `view_spec`); answered through
  /// SchedulerCore::on_remote_published.
  virtual void remote_publish(uint64_t id, const std::vector<int32_t>& prompt, size_t first_chunk,
                              RankViews views, const std::string& view_spec,
                              size_t first_view_chunk, bool skip_held) = 0;
  /// Recompute front: ask a net_fetcher to fetch the cached chunks of `prompt` (at
  /// most `max_positions`) from the back, meeting the drafter's prefill (which
  /// creates the entry) through `meetings` (one per rank).
  virtual void remote_meet(uint64_t id, const std::vector<int32_t>& prompt, size_t max_positions,
                           RankMeetings meetings) = 0;
  /// Free request `id`'s full-tier entry (after the mover's pending writes);
  /// `after_drafter`: the drafter created it (recompute front), so the release goes
  /// through the drafter's mailbox, after the prefill that made it.
  virtual void release_tier(uint64_t id, bool after_drafter) = 0;
  /// Compressed first: fetch the longest cached compressed prefix of `prompt` (at
  /// most `max_positions`) keyed by `view_spec`; answered through
  /// SchedulerCore::on_remote_compressed_fetched.
  virtual void remote_fetch_compressed(uint64_t id, const std::vector<int32_t>& prompt,
                                       size_t from_positions, size_t max_positions,
                                       const std::string& view_spec, RankViews base,
                                       size_t max_suffix) = 0;
  /// Compressed first, vericache: the drafter prefills [cached, n) exactly (the tier
  /// holds [0, cached)); answered through SchedulerCore::on_prefill_finished.
  virtual void finish_prefill(uint64_t id, size_t cached) = 0;
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
  /// Remote prefix cache: net_fetchers with a fetch or publish outstanding, now and
  /// at most (written by the scheduler's outbox).
  std::atomic<size_t> fetchers_busy{0}, fetchers_busy_peak{0};
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
  /// Remote prefix cache: the store's chunk size (requests with RequestCtx::remote
  /// go through remote_fetch before prefill; their submitter sets it only when a
  /// store is configured).
  void set_remote_chunk_tokens(size_t t) { remote_chunk_ = t; }
  /// Compressed first, vericache: draft up to this many tokens from the guess while
  /// the full chunks arrive (at least one round's; at most fold_every plus a round,
  /// what the tail's reservation holds). 0: one round.
  void set_remote_predraft(size_t tokens) { remote_predraft_ = tokens; }
  /// Remote prefix cache: a request's full chunks are fetched this many at a time
  /// (0: the whole prefix in one fetch), each segment asked for once the one before
  /// came back whole, so requests waiting for a net_fetcher get it between two
  /// segments of a long fetch instead of after all of it.
  void set_remote_fetch_segment(size_t chunks) { remote_segment_ = chunks; }
  /// Fast-memory bytes reserved by active requests.
  [[nodiscard]] size_t fast_reserved() const { return fast_reserved_; }

  void submit(std::shared_ptr<RequestCtx> ctx);
  void cancel(uint64_t id);
  void on_prefilled(const PrefillResult& r);
  /// A lossy or vericache request's first token, ahead of on_prefilled: emitted now
  /// (on_prefilled then emits none). A token that ends the request ends it in
  /// on_prefilled, so that its chunks are published and its stats complete, as
  /// before. Ignored unless the request is prefilling.
  void on_first_token(uint64_t id, int32_t token, float logprob, std::span<const TokenLogprob> top);
  void on_drafted(DraftBlock& b);
  void on_verified(std::shared_ptr<const VerifyOutcome> v);
  void on_failed(uint64_t id, const std::string& error);
  /// The net_fetcher's answer: the prefix now in the tier (f.positions), or `error`
  /// (the entry could not be made: the request fails, as a local prefill would).
  void on_remote_fetched(uint64_t id, const RemoteFetch& f, const std::string& error);
  /// The publish was queued (`chunks` full and `compressed_chunks` compressed
  /// chunks of it): the entry may be freed now.
  void on_remote_published(uint64_t id, size_t chunks, size_t compressed_chunks = 0);
  /// Compressed first: the fetched views, one per rank (empty: no chunk, or the
  /// ranks' prefixes differed), and the fetch's counts.
  void on_remote_compressed_fetched(uint64_t id, RankViews views, const RemoteCompressedFetch& f);
  /// Compressed first, vericache: the exact first token (finish_prefill's answer).
  void on_prefill_finished(const PrefillResult& r);
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
  /// Appends a token and calls back; returns the stop reason ("" to go on; "error"
  /// when the callback threw, its message in c.callback_error).
  std::string push(RequestCtx& c, int32_t tok, float logprob, std::span<const TokenLogprob> top);
  void finish(RequestCtx& c, const std::string& reason, const std::string& error = "");
  void start_prefill(RequestCtx& c);
  /// The full flow: the fetch from the back meeting the prefill (recompute_front),
  /// else start_remote_fetch up to remote_limit.
  void start_full_flow(RequestCtx& c);
  void start_meeting(RequestCtx& c);
  void start_remote_fetch(RequestCtx& c, size_t max_positions);  // the full chunks
  void fetch_segment(RequestCtx& c, size_t from);  // the next of them, from `from` on
  void fetch_compressed_segment(RequestCtx& c, size_t from);  // compressed first's likewise
  /// Where a segment from `from` ends, for a fetch ending at `end`.
  [[nodiscard]] size_t segment_end(size_t from, size_t end) const;
  void start_verify(RequestCtx& c);  // the drafts in c.drafts, from the pending token
  /// The next round's drafts from c.ahead (up to L of them, after the `skip` the
  /// verifier already confirmed), verified without drafting.
  void verify_ahead(RequestCtx& c, size_t skip, size_t L);
  void maybe_finish_prefill(RequestCtx& c);  // compressed first: when all is in
  /// Compressed first: room for a fetched view's suffix of `suffix` positions in the
  /// tail, when it is longer than the reservation covers (RequestCtx::cf_suffix_limit).
  void grow_suffix_reservation(RequestCtx& c, size_t suffix);
  /// `first_view_chunk`: the views' chunks from there on (compressed first: those
  /// it did not fetch).
  void publish_full_chunks(RequestCtx& c, RankViews views, size_t first_view_chunk = 0);
  /// Recompute front: the stats of what each side covered, and where publishing starts.
  void note_meeting(RequestCtx& c, const MetPrefix& met);
  /// release_tier once, if the scheduler holds it; `prefilling`: the drafter's
  /// prefill of it may be in flight (it writes the entry): through the drafter.
  void free_tier(RequestCtx& c, bool prefilling = false);
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
  size_t remote_chunk_ = 0;
  size_t remote_predraft_ = 0;
  size_t remote_segment_ = 0;
  // The link's and the prefill's seconds per position so far (recompute_front_priced).
  FrontRates front_rates_;
  // Requests whose publish is being queued (the reply frees their entry), finished or not.
  std::unordered_map<uint64_t, std::shared_ptr<RequestCtx>> publishing_;
};

}  // namespace vc::actors

// The drafter's plain object: owns the fast-memory KV (prompt prefill, compressed
// views, paged tails) of every admitted request and runs one batched decode step
// over all requests that are drafting (continuous batching). The drafter actor
// wraps it; tests drive it directly.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtiers/compressor.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"
#include "runtime/compression.hpp"
#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/hidden_score_log.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/verifier.hpp"

namespace vc {

/// A request as the drafter sees it.
/// A compressed view per tensor-parallel rank (rank r's holds its KV heads); one at
/// degree 1.
using RankViews = std::vector<std::shared_ptr<const CompressedView>>;

struct DraftSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  DecodeMode mode = DecodeMode::vericache;
  std::string compressor = "snapkv";
  CompressorSettings compressor_params;
  double ratio = 4.0;
  size_t stats_window = 32;
  size_t prefill_chunk = 256;
  size_t max_new_tokens = 0;  // sizes the full tier's file / memory
  size_t fold_every = 64;     // vericache: see GenerateOptions::fold_every
  SamplingParams sampling;
  DraftHierarchy draft_hierarchy = DraftHierarchy::none;  // vericache: see GenerateOptions
  NgramParams ngram;
  /// Remote prefix cache (lossy, vericache): the full-tier entry was created before
  /// prefill (by the engine's net_fetcher) and already holds the prompt's positions
  /// [0, remote_cached), fetched from the store; only the rest is prefilled. Whoever
  /// created the entry releases it: the drafter neither drops it on failure nor
  /// after a lossy prefill, nor at release().
  bool tier_ready = false;
  size_t remote_cached = 0;
  /// Remote prefix cache, recompute front (EngineConfig::remote_recompute_front;
  /// tier_ready, but prefill() creates the entry, for its caller to release): a net_fetcher fetches the cached chunks from the
  /// last one down meanwhile; prefill() computes the prefix from the first chunk up
  /// until the two meet (meet_back_fetch: once the entry exists, the fetched chunks
  /// go into it ahead of the front and are joined there), then prefills the rest. PrefillResult::met says what each side covered. One per
  /// tensor-parallel rank (the drafter of a shard takes its rank's; the ranks'
  /// fronts agree chunk by chunk). Empty: none.
  RankMeetings remote_meetings;
  /// Remote prefix cache: PrefillResult::views gets a copy of the prompt's view, for
  /// publishing its compressed chunks (lossy, vericache).
  bool copy_view = false;
  /// Remote prefix cache, compressed first (lossy, vericache): the views of the
  /// prompt's positions [0, C) fetched from the store, one per tensor-parallel rank
  /// (its KV heads'; the drafter of a shard takes its rank's). prefill() computes
  /// the suffix [C, n) over it into the tail, with no full tier: its first token is
  /// the drafter's guess (PrefillResult::exact_pending) until finish_prefill() in
  /// vericache mode; lossy mode decodes over the fetched view as it is. Empty: none.
  RankViews fetched_views;
  /// Compressed first, vericache: the remote store's chunk size. When the prompt's
  /// complete chunks reach past the fetched view, finish_prefill() rebuilds the view
  /// over the whole prompt as a local prefill builds it (the exact prefill of the
  /// suffix gathers the statistics) in place of the fetched one, and
  /// PrefillResult::views gets a copy, to publish the compressed chunks the store
  /// lacked. 0: the fetched view stays.
  size_t publish_chunk_tokens = 0;
};

/// The drafter's view of a generate request: its prompt and the options that shape
/// its KV (mode, compressor, ratio, new tokens, folding, sampling).
[[nodiscard]] DraftSpec make_draft_spec(uint64_t id, std::span<const int32_t> prompt,
                                        const GenerateOptions& opt);

struct PrefillResult {
  uint64_t id = 0;
  int32_t token = 0;  // the first output token (from the prompt's last logits)
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;  // with sampling.top_logprobs > 0
  size_t compressed_bytes = 0, compressed_full_bytes = 0;
  size_t fast_bytes_peak = 0;  // the request's fast memory so far (view + blocks)
  double seconds = 0;
  /// With DraftSpec::copy_view: a copy of the prompt's compressed view per rank
  /// (host memory, not charged to the fast-memory budget; freed once published).
  RankViews views;
  /// Compressed first (DraftSpec::fetched_views), vericache: `token` is the drafter's
  /// guess from the suffix over the fetched view, not a token to emit; the request
  /// may draft from it, and finish_prefill() gives the exact first token.
  bool exact_pending = false;
  /// finish_prefill(): the block drafted from the guess is kept (the guess was the
  /// exact token), so its drafts are the first round's (verify them from p0 = n).
  bool drafts_kept = false;
  /// DraftSpec::remote_meetings: the chunks prefilled from the front and those
  /// fetched from the back (the prompt's positions [0, met->cached_chunks() *
  /// chunk) came from the two), and the first chunk to publish.
  std::optional<MetPrefix> met;
};

/// A finished block: drafts (vericache) or final tokens (full, lossy).
struct DraftBlock {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // final tokens only
  /// Final tokens with sampling.top_logprobs > 0: per token, its top-N list.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  bool final = false;
  /// Final tokens the block has so far, sent ahead of its end (set_stream_final):
  /// the block goes on, and its last part comes with more = false.
  bool more = false;
  double seconds = 0;           // this request's share of the batched steps
  /// vericache: the view is due to be rebuilt at this round's commit, and its
  /// compressor needs the verify pass's statistics (VerifyJob::collect_stats).
  bool wants_stats = false;
  /// vericache with KVzap: the verify pass scores its rows' hidden states with this
  /// (VerifyJob::hidden).
  std::shared_ptr<const HiddenScorer> hidden = nullptr;
  size_t fast_bytes_peak = 0;   // the request's fast memory so far (view + blocks)
  DraftLevelStats levels;       // this block's passes and n-gram proposals
  std::vector<uint8_t> proposed_by_ngram;  // per token: an n-gram proposal the drafter kept
};

class DraftBatcher {
 public:
  /// capacity_tokens: positions the block pool holds for all requests together.
  /// `tier` receives the prompt's full KV of lossy and vericache requests (may be
  /// null when every request is full mode). `budget` (may be null): the fast-memory
  /// budget charged for blocks, views and the prefill staging. stage_positions:
  /// KV positions per chunk of a streamed prefill (0: whole layers). block_tokens:
  /// positions per paged block (the full tier's too, for exactness).
  DraftBatcher(std::shared_ptr<const Model> model, FullTier* tier, size_t capacity_tokens,
               DType kv_dtype, int threads, FastMemory* budget = nullptr,
               size_t stage_positions = LayerStreamer::kDefaultChunkPositions,
               size_t block_tokens = kDefaultBlockTokens);
  ~DraftBatcher();

  /// Prefill (+ statistics + compression + the full tier copy for vericache).
  /// Throws vc::Error for a bad request; nothing of it is kept then.
  [[nodiscard]] PrefillResult prefill(const DraftSpec& spec);
  /// Starts a block of `n` tokens from the pending token (n may be 0: the block
  /// completes at the next step()). `ahead` (compressed first, before
  /// finish_prefill, after the block drafted from the guess): the block continues
  /// from the last draft instead, drafting further ahead while the full chunks
  /// arrive; the round's start (the guess and its position) stays.
  void start(uint64_t id, size_t n, bool ahead = false);
  /// True when some request has a block in progress that step() would advance (a
  /// request whose view's rebuild is pending takes no step).
  [[nodiscard]] bool busy() const;
  /// One batched decode step over every request with a block in progress; returns
  /// the blocks that completed.
  [[nodiscard]] std::vector<DraftBlock> step();
  /// vericache: the verified KV replaces the drafts' KV at p0..p0+accepted; the
  /// rest is rolled back; the pending token becomes the verifier's last token. When
  /// the tail has reached fold_every positions, the view is rebuilt over [0, p0)
  /// from the full tier through the compressor (the tier holds [0, p0) by then).
  /// `ahead` > 0: the scheduler goes on verifying drafts made ahead (every draft of
  /// the round accepted, and the verifier's last token is the first of the `ahead`
  /// drafts past the round): nothing is rolled back, the next round starts at that
  /// token, and drafting, when it resumes, continues from the last draft. Throws
  /// vc::Error when the tail does not hold exactly those drafts.
  /// With `defer_fold`, a view's rebuild that is due is left for fold(): until
  /// then fold_pending(id) is true and step() leaves the request out.
  void commit(uint64_t id, const VerifyOutcome& v, size_t ahead = 0, bool defer_fold = false);
  [[nodiscard]] bool fold_pending(uint64_t id) const;
  /// The rebuild a deferred commit left (a no-op when none is pending). With a chunk
  /// hook it yields before each layer it reads back.
  void fold(uint64_t id);
  /// Compressed first, vericache (PrefillResult::exact_pending): the full tier entry
  /// (created by the caller, tier_ready) now holds the prompt's positions [0, cached)
  /// from the store; prefills [cached, n) exactly into it, puts the exact KV of the
  /// suffix [C, n) over the tail's guesses and samples the first token from the exact
  /// logits. A block drafted from the guess (none may be in progress) is kept when
  /// the guess was that token (drafts_kept), else dropped. With
  /// DraftSpec::publish_chunk_tokens, the view may be rebuilt (see there). Throws
  /// vc::Error.
  [[nodiscard]] PrefillResult finish_prefill(uint64_t id, size_t cached);
  /// Frees everything the request holds here, and its full-tier entry (idempotent).
  void release(uint64_t id);

  /// The pending token and its position when the last block started (the verify
  /// job's t0 and p0).
  [[nodiscard]] std::pair<int32_t, size_t> pending(uint64_t id) const;
  /// Fast-memory bytes the request holds: its compressed view (as held) + the
  /// paged blocks it references, or its whole KV's blocks in full mode.
  [[nodiscard]] size_t fast_bytes(uint64_t id) const;
  /// The most fast_bytes(id) has been.
  [[nodiscard]] size_t fast_bytes_peak(uint64_t id) const;
  [[nodiscard]] size_t requests() const { return reqs_.size(); }
  /// Bytes the prefill streamer read from the full tier (thread-safe).
  [[nodiscard]] size_t prefill_bytes_streamed() const { return stream_ ? stream_->bytes_streamed() : 0; }
  /// View rebuilds so far (all requests).
  [[nodiscard]] size_t folds() const { return folds_; }
  /// Requests with a block in progress.
  [[nodiscard]] const std::vector<uint64_t>& active() const { return active_; }
  /// Rows and requests of the last step() (tracing).
  [[nodiscard]] size_t last_step_rows() const { return last_ids_.size(); }
  [[nodiscard]] const std::vector<uint64_t>& last_step_ids() const { return last_ids_; }
  [[nodiscard]] PagedKvCache& cache() { return cache_; }
  /// Runs f(t) on each of the batcher's compute threads (t = 0: the calling thread),
  /// for thread binding.
  void run_on_each_thread(const std::function<void(int thread)>& f) { ws_.pool().run_on_each(f); }
  /// step() also returns, for every full or lossy block not done yet, the final tokens
  /// it decoded in that step (DraftBlock::more), so that a caller can stream them as
  /// they come rather than a block at a time. Off by default.
  void set_stream_final(bool on) { stream_final_ = on; }
  /// Called from prefill() with a lossy or vericache request's first token (id,
  /// token, logprob, top logprobs) as soon as the prompt's exact logits exist,
  /// before its view is built: the same token PrefillResult carries later. Not for
  /// full mode, nor a compressed-first guess. Runs on the prefilling thread.
  using FirstTokenHook =
      std::function<void(uint64_t id, int32_t token, float logprob, std::vector<TokenLogprob> top)>;
  void set_first_token_hook(FirstTokenHook hook) { first_token_hook_ = std::move(hook); }
  /// Called before each chunk of a prompt's prefill (Workspace::chunk_hook); the
  /// hook may step() and run the other calls here in between, for other requests
  /// (the engine's drafter does: actors/workers.cpp). The prefill's request is not
  /// one of them until prefill() returns.
  void set_chunk_hook(std::function<void()> hook) { ws_.chunk_hook = std::move(hook); }

 private:
  struct Req {
    DraftSpec spec;
    KvSequence seq;
    std::optional<CompressedView> view;
    std::unique_ptr<Compressor> compressor;
    HiddenScoreLog hidden_log;  // KVzap: scores of every verified position, for folds
    std::shared_ptr<const HiddenScorer> scorer;  // KVzap's surrogate (the compressor's)
    int32_t cur = 0;     // the next input token
    size_t pos = 0;      // its position
    int32_t start_token = 0;  // the pending token when the block started (verify's t0)
    size_t p0 = 0;            // its position
    size_t fold_from = 0;     // folds count the tail from here (a fetched view: n)
    size_t want = 0;     // tokens this block still needs
    size_t block_end = 0;     // p0 + the block's length + 1: positions reserved
    std::vector<int32_t> context;  // tokens at positions [0, pos]: the n-gram level's text
    DraftBlock block;
    FastCharge view_charge;   // the view's held bytes, charged to the budget
    bool exact_pending = false;  // compressed first: finish_prefill() is due
    /// commit(defer_fold): the rebuild fold() runs, and the statistics it uses.
    bool fold_wanted = false;
    std::shared_ptr<const PrefillStats> fold_stats;
    size_t fold_n = 0;  // the positions it covers: p0 at the commit (which may move p0 on)
    size_t fast_peak = 0;
  };
  /// prefill() of a spec with a fetched_view: the suffix over it, into r's tail.
  PrefilledRequest prefill_over_fetched_view(const DraftSpec& spec, Req& r);
  /// Updates r's peak fast bytes; returns it.
  size_t note_fast(Req& r) const;
  [[nodiscard]] size_t fast_bytes(const Req& r) const;
  Req& get(uint64_t id, const char* op);
  [[nodiscard]] bool fold_due(const Req& r) const;
  /// Rebuilds r's view over [0, n) (stats: the statistics to plan with).
  void refold_view(uint64_t id, Req& r, size_t n, const PrefillStats* stats, Workspace* ws);
  [[nodiscard]] const Req& get(uint64_t id, const char* op) const;

  std::shared_ptr<const Model> model_;
  FullTier* tier_;
  FastMemory* budget_;
  Workspace ws_;
  PagedKvCache cache_;
  std::unique_ptr<LayerStreamer> stream_;  // prefill of lossy / vericache requests
  std::unordered_map<uint64_t, Req> reqs_;
  std::vector<uint64_t> active_;  // requests with a block in progress, in start order
  std::vector<uint64_t> last_ids_;
  size_t folds_ = 0;
  bool stream_final_ = false;
  FirstTokenHook first_token_hook_;
};

}  // namespace vc

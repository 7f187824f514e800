// VeriCache embedding API: the one header a front end needs. Create an engine from
// a config, submit requests, receive tokens through a callback, cancel, read stats.
// Behind it, one actor per resource (scheduler, drafter, mover, verifier) runs the
// draft ⇄ verify rounds of many requests at once, staggered across requests.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace vc {
class PlacementBinder;
}

namespace vericache {

/// Engine-wide settings (validated by the constructor; bad values throw
/// std::runtime_error naming the field).
struct EngineConfig {
  std::string model_dir;            ///< Hugging Face model directory
  /// Tensor-parallel degree: the model is sharded over this many ranks (CPU: rank
  /// threads), as `generate --tp` shards it; it must split the model's attention
  /// heads, KV heads (or be a multiple of them) and MLP width. The drafter, verifier
  /// and mover each drive every rank; each rank holds its KV heads' share of every
  /// tier. At tp > 1 the budgets below are per rank, and each rank's remote chunks
  /// (full and compressed) hold its KV heads under keys of their own.
  int tp = 1;
  int threads = 0;                  ///< per compute actor (per rank), 0-1024; 0 = auto
  /// Where the forward passes run: "cpu", or "cuda" / "cuda:N" (the model's weights
  /// on that GPU, whole passes there, attention over device copies of the KV the
  /// passes read; the KV tiers, compressors and sampling stay on the CPU; tp must be
  /// 1). An unusable device is an error naming it.
  std::string device = "cpu";
  std::string full_tier = "host";   ///< where full KV lives: "host" or "disk"
  std::string disk_dir;             ///< holds the disk tier's private dir ("" = $TMPDIR or /tmp)
  double link_bytes_per_second = 0; ///< modelled link to the full tier (per rank; 0 = unthrottled)
  /// Fast-memory budget in bytes for every byte of KV in fast memory (compressed
  /// views, draft tails, full-mode KV, staging of verify and prefill passes); the
  /// block pool holds at most this, and requests wait (FIFO) until their need fits.
  /// 0: 65,536 tokens of full KV on the CPU; on a GPU (`device` cuda), the device's
  /// memory free once the weights are on it, within gpu_memory_utilization, and
  /// at most half the host's available memory (runtime/device_budget.hpp). At tp > 1: per rank (each rank's KV heads' share;
  /// a rank's fast memory is its own device's), and so is the default.
  size_t fast_memory_bytes = 0;
  /// On a GPU with fast_memory_bytes 0: the share (0, 1] of the device's total
  /// memory this engine may hold, weights and KV; the rest is left for the passes'
  /// buffers. Ignored on the CPU.
  double gpu_memory_utilization = 0.9;
  size_t stage_positions = 1024;    ///< KV positions per staged chunk of the full KV (0: whole layers)
  /// KV positions per paged block (1-4096), in fast memory and in the full tier.
  /// Prefix sharing and remote chunks (remote_chunk_tokens: whole blocks) go by
  /// blocks; outputs are exact at every size, their last bits belong to the size.
  size_t block_tokens = 64;
  /// The full tier's own budget in bytes (host memory or disk); lossy and vericache
  /// requests also wait until their full KV fits in it. 0: not limited. At tp > 1:
  /// per rank, against each request's per-rank share of its full KV.
  size_t full_tier_bytes = 0;
  std::string kv_dtype = "bf16";    ///< "bf16" or "f32"
  size_t max_active = 16;           ///< requests in flight (prefill/draft/verify) at once
  /// Requests whose verify jobs wait while a pass runs share the next pass, up to
  /// this many: one forward reads the weights once for all their rows (outputs bit
  /// for bit those of passes alone). Each costs a streamer's staging buffers in the
  /// fast-memory budget. 1: one request per pass.
  size_t verify_batch = 4;
  size_t max_queue = 256;           ///< waiting requests; beyond it submit answers "overloaded"
  bool lockstep = false;            ///< everyone drafts, then everyone verifies (comparison only)
  /// The drafter runs a prompt's prefill a chunk (prefill_chunk tokens) at a time,
  /// with the draft steps of the requests already decoding, and the other prompts'
  /// chunks, in between: a long prompt no longer stops every other stream while it
  /// is prefilled. Full-mode prompts still go one after another (so that a prompt
  /// shares the prefix blocks of the one before). The same tokens either way. At
  /// tp > 1 every rank's prefill yields before the same chunk. A view is then built,
  /// and rebuilt during decoding (fold_every), a layer at a time likewise, its
  /// request taking no step meanwhile. false: each prefill and rebuild runs whole.
  bool slice_prefill = true;
  /// Prompt tokens per prefill chunk (1 to 65536): with slice_prefill, the most a
  /// request already decoding waits for between two steps; smaller chunks shorten
  /// that wait and cost the long prompt more passes (each reads the weights once).
  /// The same tokens at every size (the kernels are batch invariant).
  size_t prefill_chunk = 256;
  bool trace = false;               ///< record slices for write_trace()
  /// Remote prefix cache, "redis://HOST:PORT" ("" = none). Lossy and vericache
  /// requests take the longest cached prefix of their prompt from it (whole chunks,
  /// into their full-tier entry, by the engine's net_fetcher actor), prefill only
  /// the rest, then publish the chunks the store lacked (write-behind, bounded;
  /// decoding never waits for the store). A store fault (down, slow, a corrupt,
  /// missing or foreign chunk) ends the cached prefix there: the rest is computed
  /// locally, never a different token. A bad URL throws from the constructor.
  std::string remote_url;
  size_t remote_chunk_tokens = 256; ///< tokens per remote chunk (a multiple of 16)
  int remote_ttl_seconds = 86400;   ///< published chunks expire (0: never)
  int remote_timeout_ms = 1000;     ///< connect, and each pipelined batch of the store
  /// After a store fault (unreachable, deadline passed, connection dropped) the store
  /// is skipped this long: requests admitted meanwhile prefill locally at once instead
  /// of each waiting for its own deadline. 0: every request tries the store.
  int remote_retry_ms = 5000;
  /// Compressed first: a request asks the store for its prompt's compressed chunks
  /// (its compressor, parameters and ratio) before the full ones; with a hit the
  /// drafter starts from them at once (and, in vericache mode, drafts a block from
  /// its guess of the first token while the full chunks arrive); every emitted
  /// vericache token is still verified against the full KV. Lossy requests then
  /// decode over the fetched view. false: the full flow only. Not for KVzap.
  bool remote_compressed_first = true;
  /// The full flow (without compressed first, or when it finds no compressed
  /// chunk): a net_fetcher fetches the cached prefix's chunks from the last one down
  /// while the drafter prefills the prefix from the first one up, until the two meet
  /// (the link and the cores both work; the same tokens). At tp > 1 each rank meets
  /// its own fetch, and the ranks agree chunk by chunk. false: fetch, then prefill.
  bool remote_recompute_front = false;
  /// Recompute the front only for a request alone in the engine when its full flow
  /// starts (no other request admitted or waiting); beside others it takes the plain full flow,
  /// so that a prefill the store could have spared never takes the cores from their
  /// decoding. Alone, its first token comes as with remote_recompute_front. Implies
  /// remote_recompute_front for the requests it lets through.
  bool remote_recompute_front_when_idle = false;
  /// Recompute the front when it saves the request more time than it takes from the
  /// others: beside n other requests (admitted or waiting), when fetching a position
  /// has taken more than n times as long as prefilling one, by the engine's
  /// measurements so far (the plain fetches' and prefills' seconds per position;
  /// none yet: fetch, then prefill). Alone: always. The request's stats say why
  /// (RequestStats::remote_front_price). remote_recompute_front takes precedence;
  /// this one over _when_idle.
  bool remote_recompute_front_priced = false;
  /// Compressed first, vericache: the drafter drafts up to this many tokens from its
  /// guess while the full chunks arrive (at least one round's; at most fold_every
  /// plus a round, what the request's tail reservation holds); once the guess proves
  /// right, rounds take their drafts from these while the verifier accepts every
  /// draft and its next token is the next one ahead. 0: one round.
  size_t remote_predraft = 256;
  /// Compressed first: the longest suffix past the fetched compressed prefix (a
  /// prompt that extends a cached one) a request drafts over before its exact
  /// prefill (0: one chunk). Admission reserves fast memory for one chunk of
  /// suffix; a longer one (up to this many positions) is reserved when the
  /// compressed chunks arrive, if the budget has room then, else the request takes
  /// the full flow. Complete chunks past the fetched ones are compressed once the
  /// full KV is in (the view rebuilt over the whole prompt) and published. One chunk
  /// by default: on a 2-core CPU the drafter's pass over a long suffix competes with
  /// the exact prefill, and the full flow came first sooner (README, bench remote
  /// --extend).
  size_t remote_compressed_suffix = 0;
  /// net_fetcher actors (each with its own store connections, all sharing the
  /// store's health): one request's long fetch does not hold up the others'.
  /// Each fetch or publish goes to the one with the fewest outstanding.
  int remote_fetchers = 2;
  /// A request's full chunks are fetched this many at a time (0: its whole prefix in
  /// one fetch): each segment goes to the net_fetcher with the fewest outstanding
  /// once the one before came back whole, so a request admitted behind a long fetch
  /// (a 32K prefix over a slow link) waits for a segment of it, not all of it.
  size_t remote_fetch_segment = 8;
  /// Thread and memory placement: "none" (the OS places threads), or "auto": plan
  /// CPU ranks for this machine's hwloc topology and the degree (the ranks compute
  /// on the CPU; as `vericache topo --tp N` plans a machine without GPUs: each rank
  /// on a NUMA node's share of cores) and bind each rank's drafter, verifier and
  /// mover threads (compute, rank and copy threads) to its cores, their memory to
  /// its shard's NUMA node, and each net_fetcher's thread near the NIC.
  /// Engine::placement() reports it.
  std::string placement = "none";
};

/// One actor's applied placement (EngineConfig::placement "auto").
struct PlacementLine {
  std::string what;      ///< "drafter rank 0", "mover rank 1", "fetcher"
  bool applied = false;  ///< every thread's binding read back as planned
  std::string detail;    ///< "2 threads bound to PU 0, memory bound to node P#0", or why not
};

/// One candidate token and its log-probability (natural log, under the model).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

/// One request.
struct Request {
  std::string prompt;               ///< tokenized as written (special tokens recognised)
  std::vector<int32_t> prompt_ids;  ///< used instead of `prompt` when non-empty
  int max_tokens = 128;
  std::string mode = "vericache";   ///< "full", "lossy" or "vericache"
  std::string compressor = "snapkv";
  std::vector<std::pair<std::string, double>> compressor_params;  ///< e.g. {"window", 16}
  double ratio = 4.0;
  std::string draft = "16";         ///< a length, or "auto"
  /// With draft "auto": the measured cost of a forward pass by row count, (rows,
  /// seconds) with rows ascending, e.g. from `vericache bench rows --json`; the
  /// adaptive policy weighs verify passes of L+1 rows with it. Empty: fitted from
  /// the request's own passes.
  std::vector<std::pair<double, double>> row_costs;
  /// Levels above the compressed-KV drafter: "none", or "ngram" (a prompt-lookup
  /// proposer over the request's own text whose proposals the drafter checks in one
  /// pass; the output is unchanged, the drafter needs fewer passes).
  std::string draft_hierarchy = "none";
  size_t ngram_min = 2;             ///< shortest context suffix the n-gram level matches
  size_t ngram_max = 4;             ///< longest
  size_t ngram_proposal = 8;        ///< tokens it proposes per drafter pass at most
  size_t fold_every = 64;           ///< rebuild the compressed view after this many verified tokens (0 = never)
  float temperature = 0.0f;         ///< 0 = greedy
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  /// Report the N most likely tokens at every output position (0..20; 0 = none) in
  /// Result::output_top_logprobs and to the detailed token callback. They come from
  /// the distribution the token was chosen from: in vericache mode the verifier's,
  /// so they equal mode "full" bit for bit. Never changes the output.
  int top_logprobs = 0;
};

/// Per-request figures.
struct RequestStats {
  size_t prompt_tokens = 0, output_tokens = 0;
  size_t rounds = 0, drafted = 0, accepted = 0;
  std::vector<size_t> accepted_histogram;
  /// The draft hierarchy, per level: the n-gram level's proposals, those the
  /// compressed-KV drafter kept, those the verifier then accepted; the drafter's
  /// forward passes (without the n-gram level: one per draft).
  size_t ngram_proposed = 0, ngram_confirmed = 0, ngram_accepted = 0, drafter_passes = 0;
  double ngram_seconds = 0;  ///< the n-gram level's cost: its context lookups
  /// verify_seconds: its share of each verify pass (a pass shared by n requests
  /// counts 1/n of its time for each).
  double queue_seconds = 0, prefill_seconds = 0, draft_seconds = 0, verify_seconds = 0;
  double total_seconds = 0;
  /// From submit() to the end of its prefill, the view built (the first token may
  /// come before it: it needs only the prompt's exact logits).
  double prefilled_after_seconds = 0;
  /// Summed over its rounds: the requests whose rows shared the round's verify pass,
  /// itself included (EngineConfig::verify_batch); / rounds is the mean.
  size_t verify_pass_requests = 0;
  size_t compressed_bytes = 0;       ///< at tp > 1: summed over the ranks
  /// The same positions' full KV (bf16): compressed_full_bytes / compressed_bytes is
  /// the achieved ratio (it varies per request with threshold selection).
  size_t compressed_full_bytes = 0;
  size_t fast_bytes_peak = 0;       ///< most fast memory it held (view + blocks; tp > 1: the fullest rank's)
  size_t fast_bytes_reserved = 0;   ///< what admission reserved for it (its bound; tp > 1: on each rank)
  /// Remote prefix cache (EngineConfig::remote_url; lossy and vericache requests):
  bool remote = false;              ///< the store was asked for this request's prefix
  size_t remote_chunks_hit = 0;     ///< prompt chunks taken from it, from the first
  size_t remote_positions = 0;      ///< prompt positions they cover (not prefilled)
  size_t remote_bytes_fetched = 0;  ///< value bytes received (a back fetch's: those of chunks the front
                                    ///< also computed included, once its run is in)
  double remote_fetch_seconds = 0;  ///< summed over its segments (time in the store's fetches)
  size_t remote_fetch_segments = 0; ///< fetches its prefix took (EngineConfig::remote_fetch_segment)
  std::string remote_stop_reason;   ///< why the cached prefix ended there ("" = at the limit)
  /// The full flow met a fetch from the back with a prefill from the front
  /// (EngineConfig::remote_recompute_front, or _when_idle for a request alone)
  bool remote_recompute_front = false;
  /// EngineConfig::remote_recompute_front: prefix positions the drafter prefilled
  /// from the front while the chunks above came from the store (remote_chunks_hit)
  size_t remote_front_recomputed = 0;
  /// EngineConfig::remote_recompute_front_priced: the decision's reasons, one line
  std::string remote_front_price;
  size_t remote_chunks_published = 0;  ///< chunks queued for write-behind publishing
  size_t remote_compressed_chunks_published = 0;  ///< the view's chunks queued likewise
  /// Compressed first (EngineConfig::remote_compressed_first):
  bool remote_compressed_first = false;     ///< drafting started from fetched compressed chunks
  size_t remote_compressed_chunks_hit = 0;  ///< compressed chunks found, from the first
  size_t remote_compressed_positions = 0;   ///< prompt positions they cover
  size_t remote_bytes_compressed = 0;       ///< value bytes received for them
  double remote_compressed_fetch_seconds = 0;
  std::string remote_compressed_stop_reason; ///< why they ended there, or why they were not used
  size_t remote_predrafted = 0;   ///< vericache: drafts made before the exact first token
  bool remote_predrafts_kept = false;  ///< they were verified (the drafter's guess of it was right)
  size_t remote_predraft_rounds = 0;   ///< verification rounds whose drafts were made ahead
  double remote_full_wait_seconds = 0; ///< vericache: the drafter idle until the full chunks were in
};

struct Result {
  uint64_t id = 0;
  bool ok = false;
  std::string error;                ///< why it failed ("overloaded: ...", a tier error, ...)
  std::vector<int32_t> prompt_ids, output_ids;
  std::vector<float> output_logprobs;   ///< log p(token), per output token
  /// With Request::top_logprobs = N > 0: per output token, the N most likely tokens,
  /// by logprob descending (ties: the smaller id first). Empty otherwise.
  std::vector<std::vector<TokenLogprob>> output_top_logprobs;
  std::string text;
  std::string finish_reason;        ///< eos, length, stop, cancelled, error
  RequestStats stats;
};

/// Engine-wide figures.
struct EngineStats {
  size_t submitted = 0, completed = 0, failed = 0, cancelled = 0, rejected = 0;
  size_t tokens = 0;
  size_t running = 0, waiting = 0;             ///< requests active / queued now
  size_t prompt_tokens = 0;                    ///< prompt tokens of admitted requests
  size_t drafted_tokens = 0, accepted_tokens = 0;  ///< vericache rounds: drafts verified, accepted
  double seconds = 0;                          ///< since the engine started
  std::map<std::string, double> busy_fraction; ///< per resource
  int tp = 1;                                  ///< tensor-parallel degree (EngineConfig::tp)
  /// Full-tier traffic, summed over the ranks (each rank's link carries its shard).
  size_t full_tier_bytes_read = 0, full_tier_bytes_written = 0;
  size_t full_tier_bytes_held = 0;             ///< KV of requests still in the full tier
  size_t full_tier_bytes_read_verify = 0;      ///< of bytes_read: by verify passes
  size_t full_tier_bytes_read_prefill = 0;     ///< of bytes_read: by streamed prefills
  size_t full_tier_bytes_read_refold = 0;      ///< of bytes_read: by view rebuilds
  /// Fast memory: per rank at tp > 1 (the budget of each; used and peak of the
  /// fullest rank), as admission reserves it.
  size_t fast_memory_budget = 0;               ///< bytes (EngineConfig::fast_memory_bytes, or its default)
  size_t device_bytes = 0;  ///< device memory the model's backends hold (0 on the CPU): matrices, KV copies
  size_t fast_memory_used = 0, fast_memory_peak = 0;  ///< bytes charged now, and at most
  size_t fast_memory_reserved = 0;             ///< needs of the requests running now
  /// Remote prefix cache: net_fetchers (EngineConfig::remote_fetchers; 0 without a
  /// store), and the most that had a fetch or publish outstanding at once.
  size_t remote_fetchers = 0, remote_fetchers_busy_peak = 0;
};

/// Called with each emitted token, in order per request, on the engine's scheduler
/// thread (a CAF worker thread, never the thread that called submit()). While it
/// runs no other request makes progress, so keep it short and never block in it:
/// do not wait on a Submission's future there. stats(), cancel() and submit() may be
/// called from it (none of them waits for the scheduler). If it throws, its request
/// ends there (Result::ok false, the exception's message in Result::error, finish
/// reason "error"; no further call for it) and the engine goes on with the others.
/// A lossy or vericache request's first token is called back as soon as the prompt's
/// exact logits exist, before its compressed view is built: a failure after that
/// (the view's memory, a tensor-parallel rank) ends the request with an error after
/// its first token.
using TokenCallback = std::function<void(uint64_t id, int32_t token)>;

/// One emitted token with its log-probabilities, as the detailed callback sees it.
struct EmittedToken {
  int32_t id = 0;
  float logprob = 0;
  /// Request::top_logprobs entries (empty when 0); valid only during the call.
  std::span<const TokenLogprob> top_logprobs;
};
/// The same as TokenCallback (same thread, same rules), with the token's logprobs.
using TokenDetailCallback = std::function<void(uint64_t id, const EmittedToken& token)>;

class Engine {
 public:
  explicit Engine(const EngineConfig& cfg);
  /// Cancels what is in flight and shuts the actors down cleanly; a submit from a
  /// token callback meanwhile resolves at once ("the engine is shutting down").
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  struct Submission {
    uint64_t id = 0;
    std::future<Result> result;
  };
  /// Queues a request. Never throws for a bad request: the future's Result says
  /// what was wrong (ok = false; error names the field, as "field 'ratio': ...").
  /// Checks are those of every front end (runtime/request_validation.hpp).
  Submission submit(const Request& r, TokenCallback on_token = {});
  /// The same, with a callback that also receives each token's logprobs.
  Submission submit(const Request& r, TokenDetailCallback on_token);
  /// Cancels a request: its blocks are freed in every tier; its Result has
  /// finish_reason "cancelled".
  void cancel(uint64_t id);
  /// Engine-wide figures, read without a round trip to the scheduler: answers at
  /// once from any thread, a token callback included.
  [[nodiscard]] EngineStats stats();
  /// Busy share of each resource ("drafter", "mover", "verifier", ...) over a window
  /// of steady_clock time, as EngineStats::busy_fraction is over the engine's life:
  /// for instance the decode window once every request has its first token, where
  /// the prefills no longer count.
  [[nodiscard]] std::map<std::string, double> busy_fraction(
      std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to);
  /// What EngineConfig::placement "auto" bound, one line per actor and rank (empty
  /// with "none").
  [[nodiscard]] const std::vector<PlacementLine>& placement() const;
  /// Chrome trace-event JSON of everything so far (needs cfg.trace).
  void write_trace(const std::string& path);
  /// Decodes ids with the model's tokenizer, special tokens skipped. An id the
  /// vocabulary does not hold decodes to U+FFFD (Tokenizer::kUnknownTokenText), as
  /// the tokenizer does: nothing vanishes silently, and nothing throws.
  [[nodiscard]] std::string decode(const std::vector<int32_t>& ids) const;

 private:
  struct Impl;
  static void bind_threads(Impl& m, const std::shared_ptr<vc::PlacementBinder>& binder);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vericache

// Full-KV text generation for one request: prefill, then decode token by token.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/fast_memory.hpp"
#include "runtime/draft_length.hpp"
#include "runtime/draft_pass.hpp"
#include "runtime/forward.hpp"
#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/sampler.hpp"
#include "runtime/streamed_prefill.hpp"  // PromptLogitsHook

namespace vc {

class FullTier;
class LayerStreamer;
class RemoteTier;
class BackFetchBoard;
class Verifier;
struct PrefilledRequest;

/// How the decode steps see the KV cache.
enum class DecodeMode {
  full,       // every step attends over the full KV (the reference output)
  lossy,      // every step attends over the compressed view alone (what published
              // compressors do; drifts from `full`, exists for comparison)
  vericache,  // draft over the compressed view, verify against the full KV streamed
              // from the full tier: output bit-identical to `full`
};

/// "full", "lossy" or "vericache"; throws vc::Error otherwise.
[[nodiscard]] DecodeMode parse_decode_mode(const std::string& s);
[[nodiscard]] const char* decode_mode_name(DecodeMode m);

struct GenerateOptions {
  DecodeMode mode = DecodeMode::full;
  std::string compressor = "snapkv";  // lossy/vericache: a name from compressor_names()
  CompressorSettings compressor_params;  // the method's own parameters (set_param)
  double ratio = 4.0;                 // lossy/vericache: full prompt KV bytes / compressed
  size_t draft_length = 16;           // vericache: drafts per verification round
  bool draft_auto = false;            // vericache: choose the length per round instead
  size_t max_draft = 64;              // vericache: the adaptive policy's cap
  /// vericache: levels above the compressed-KV drafter. ngram: a prompt-lookup
  /// proposer offers tokens from the request's own context, the drafter checks them
  /// in one pass (draft_pass.hpp); the drafts, and so the output, are unchanged.
  DraftHierarchy draft_hierarchy = DraftHierarchy::none;
  NgramParams ngram;
  /// vericache with draft_auto: the measured cost of a forward pass by row count at
  /// about the request's context (`vericache bench rows`), which the policy weighs
  /// verify passes of L+1 rows with (DraftLengthPolicy::set_row_costs). Empty: the
  /// policy fits the observed passes alone.
  std::vector<RowCostPoint> row_costs;
  /// vericache: once the uncompressed tail holds this many verified positions, the
  /// view is rebuilt through the compressor over everything verified so far, so it
  /// keeps its budget (0: never; the tail then grows at full precision).
  size_t fold_every = 64;
  size_t stats_window = 32;           // observation window of the prefill statistics
  /// Teacher forcing (measurements): feed these tokens instead of the chosen ones;
  /// generation runs for their count.
  std::vector<int32_t> forced_output;
  bool keep_logits = false;           // return every step's logits (measurements)
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings: generation ends when the text holds one
  bool stop_at_eos = true;
  std::vector<int32_t> eos_token_ids;  // empty: the model config's eos_token_id
  size_t prefill_chunk = 256;
};

struct GenerateStats {
  size_t prompt_tokens = 0;
  size_t output_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  size_t kv_bytes = 0;  // full KV held at the end
  size_t compressed_bytes = 0;       // lossy: compressed view of the prompt, as stored
  size_t compressed_full_bytes = 0;  // lossy: the same positions at full precision
  double compress_seconds = 0;
  // vericache:
  size_t rounds = 0;                 // verification rounds
  size_t drafted = 0;                // draft tokens proposed
  size_t accepted = 0;               // drafts the verifier accepted
  std::vector<size_t> accepted_histogram;  // [k]: rounds that accepted k drafts
  DraftLevelStats levels;            // per level of the draft hierarchy
  double draft_seconds = 0, verify_seconds = 0, commit_seconds = 0;
  double verify_wait_seconds = 0;    // verify time spent waiting for full-KV layers
  size_t full_tier_bytes_read = 0;   // streamed by verify passes
  size_t full_tier_bytes_read_refold = 0;  // read back to rebuild the view
  size_t full_tier_bytes_written = 0;
  size_t compressed_bytes_read = 0;  // read by draft steps (view + tail)
  size_t folds = 0;                  // view rebuilds (fold_every)
  size_t fast_bytes_end = 0;         // view + tail at the end
  // Fast memory (every mode): the most charged at once during the request (view,
  // blocks, staging buffers), and the view + blocks part of it.
  size_t fast_bytes_peak = 0;
  size_t fast_kv_bytes_peak = 0;
  std::string full_tier;             // "host" or "disk"
  // Every mode: seconds from the call to the first emitted token.
  double time_to_first_token_seconds = 0;
  // Remote prefix cache (GeneratorConfig::remote_url; lossy and vericache):
  bool remote = false;               // a remote store was configured for this request
  size_t remote_chunks_hit = 0;      // prompt chunks taken from the store, from the first
  size_t remote_positions = 0;       // prompt positions they cover (not prefilled here)
  size_t remote_bytes_full = 0;      // value bytes fetched, full form
  size_t remote_bytes_compressed = 0;  // value bytes fetched, compressed form
  double remote_fetch_seconds = 0;   // the full chunks' fetch
  std::string remote_stop_reason;    // why the cached prefix ended where it did ("" = limit)
  size_t remote_chunks_published = 0;  // chunks queued for write-behind publishing
  // GeneratorConfig::remote_recompute_front: prefix positions prefilled here while
  // the chunks above them were fetched from the last down (remote_chunks_hit and
  // remote_positions are then those chunks, which begin here).
  size_t remote_front_recomputed = 0;
  // The compressed form (GeneratorConfig::remote_compressed_first):
  bool remote_compressed_first = false;  // drafting started from fetched compressed chunks
  size_t remote_compressed_chunks_hit = 0;
  size_t remote_compressed_positions = 0;
  double remote_compressed_fetch_seconds = 0;
  std::string remote_compressed_stop_reason;
  size_t remote_predrafted = 0;      // drafts made while the full chunks arrived
  size_t remote_suffix_drafted = 0;  // suffix positions the drafter ran over the fetched view first
  size_t remote_predraft_rounds = 0;  // verification rounds whose drafts were those
  double remote_full_wait_seconds = 0;  // the first verification's wait for them
  size_t remote_compressed_chunks_published = 0;

  [[nodiscard]] double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? double(prompt_tokens) / prefill_seconds : 0.0;
  }
  /// Decode steps per second (each output token after the first costs one step).
  [[nodiscard]] double decode_tokens_per_second() const {
    return decode_seconds > 0 && output_tokens > 1 ? double(output_tokens - 1) / decode_seconds
                                                   : 0.0;
  }
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<float> output_logprobs;  // log p(token) under the model, per output token
  /// With sampling.top_logprobs = N > 0: per output token, the N most likely tokens
  /// and their logprobs (token_logprobs; from the logits the token came from, so in
  /// vericache mode the verifier's). Empty otherwise.
  std::vector<std::vector<TokenLogprob>> output_top_logprobs;
  std::string text;                    // decoded output, cut before a stop string
  std::string finish_reason;           // "eos", "length" or "stop"
  std::vector<float> step_logits;      // [steps, vocab] when keep_logits
  GenerateStats stats;
};

struct GeneratorConfig {
  int threads = 0;               // 0: default_thread_count()
  std::string full_tier = "host";  // vericache: "host" memory or "disk"
  std::string disk_dir;            // holds the disk tier's private dir ("" = $TMPDIR or /tmp)
  double link_bandwidth = 0;       // bytes/s of the modelled link (0 = unthrottled)
  DType kv_dtype = DType::bf16;  // storage of the KV cache
  size_t max_context = 0;        // 0: the model's max_position_embeddings
  size_t block_tokens = kDefaultBlockTokens;
  /// KV positions per chunk when a pass stages the full KV (0: whole layers).
  size_t stage_positions = 1024;
  /// Fast-memory budget in bytes (blocks, the view, staging); 0: not limited. A
  /// request whose bound (fast_memory_need) does not fit fails before any work.
  size_t fast_memory_bytes = 0;
  /// The full tier's own budget in bytes (host memory or disk); 0: not limited.
  size_t full_tier_bytes = 0;
  /// The remote prefix cache, "redis://HOST:PORT" ("" = none). lossy and vericache
  /// requests take the longest cached prefix of their prompt from it (full chunks
  /// into the full tier) and prefill only the rest; after prefill they publish the
  /// chunks it lacked, write-behind. A store fault means recompute (RemoteTier).
  std::string remote_url;
  size_t remote_chunk_tokens = 256;  // tokens per remote chunk (a multiple of block_tokens)
  int remote_ttl_seconds = 86400;    // published chunks expire (0: never)
  int remote_timeout_ms = 1000;      // connect, and each pipelined batch
  int remote_retry_ms = 5000;        // after a store fault, skip the store this long (0: never)
  /// Fetch the prefix's compressed chunks first (same compressor, parameters and
  /// ratio): drafting starts from them while the full chunks stream into the full
  /// tier on a fetch thread; the first verification waits for those (remote_prefill.cpp).
  /// false: fetch the full chunks, then prefill and compress locally.
  bool remote_compressed_first = true;
  /// Compressed first, vericache: the drafter keeps drafting while the full chunks
  /// arrive, up to this many tokens (at least one round's; at most the request's
  /// max_tokens and, with folds, fold_every plus one round: what the tail's
  /// fast-memory bound holds); the rounds after the first verification take their
  /// drafts from these as long as the verifier agrees with them (decode_verified).
  size_t remote_predraft = 256;
  /// The full flow (full chunks first): the cached prefix's chunks are fetched from
  /// the last one down while the prefix is prefilled here from the first one up,
  /// until the two meet, so that the link and the local compute share the prefix
  /// and its KV is in sooner (the same bits either way: fetched chunks hold what a
  /// prefill computes). Not with tensor parallelism (ignored there).
  bool remote_recompute_front = false;
};

/// Called with each emitted token id; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

/// Owns a KV cache and a workspace; generates one request at a time.
class Generator {
 public:
  Generator(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
            const GeneratorConfig& cfg = {});
  ~Generator();

  /// Greedy or seeded generation with full-KV decoding. Throws vc::Error for a bad
  /// request (empty prompt, too long, bad sampling settings).
  [[nodiscard]] GenerateResult generate(std::span<const int32_t> prompt_ids,
                                        const GenerateOptions& opt,
                                        const TokenCallback& on_token = {});
  /// Tokenizes `prompt` (special tokens written in it are recognised) and generates.
  [[nodiscard]] GenerateResult generate(const std::string& prompt, const GenerateOptions& opt,
                                        const TokenCallback& on_token = {});

  [[nodiscard]] const Model& model() const { return *model_; }
  [[nodiscard]] Workspace& workspace() { return ws_; }
  [[nodiscard]] PagedKvCache& cache() { return cache_; }
  /// The remote prefix cache (nullptr without GeneratorConfig::remote_url).
  [[nodiscard]] RemoteTier* remote() { return remote_.get(); }
  /// As rank `rank` of a tensor-parallel group (TpGenerator), post the end of each
  /// back fetch (remote_recompute_front) on `board` and take the other ranks'
  /// there: a fetch stops below chunks another rank's run did not bring.
  void share_back_fetches(std::shared_ptr<BackFetchBoard> board, size_t rank);

 private:
  struct Request;
  void decode_stepwise(Request& rq);
  void decode_verified(Request& rq);
  /// Takes the longest cached prefix of `prompt` from the remote store into the
  /// request's full tier entry; returns the positions it covers (0 on any fault).
  size_t fetch_remote_prefix(Request& rq, std::span<const int32_t> prompt);
  /// As fetch_remote_prefix, meeting the chunks fetched from the back with a local
  /// prefill from the front (GeneratorConfig::remote_recompute_front); also returns
  /// the first chunk the store lacks (the front may have computed past it).
  std::pair<size_t, size_t> fetch_remote_prefix_meeting(Request& rq, std::span<const int32_t> prompt);
  /// Prefill of a lossy or vericache request with the remote store: compressed
  /// first when the store has the prefix's compressed chunks, else the full chunks,
  /// then local prefill of the rest; publishes what the store lacked. `on_logits`:
  /// the full flow's exact prompt logits, before its view is built and it publishes.
  [[nodiscard]] PrefilledRequest prefill_with_remote(Request& rq, std::span<const int32_t> prompt,
                                                     const PromptLogitsHook& on_logits = {});
  /// The compressed-first flow, given the fetched view of positions [0, covered).
  [[nodiscard]] PrefilledRequest prefill_compressed_first(Request& rq, std::span<const int32_t> prompt,
                                                          CompressedView view,
                                                          const PromptLogitsHook& on_logits = {});
  /// Creates the full tier, its streamer and the verifier on first use.
  void ensure_full_tier();

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  GeneratorConfig cfg_;
  Workspace ws_;
  PagedKvCache cache_;
  std::unique_ptr<FastMemory> fast_;
  std::unique_ptr<FullTier> full_tier_;
  std::unique_ptr<LayerStreamer> streamer_;
  std::unique_ptr<Verifier> verifier_;
  std::unique_ptr<RemoteTier> remote_;
  std::shared_ptr<BackFetchBoard> back_board_;  // share_back_fetches
  size_t back_rank_ = 0, back_fetches_ = 0;
  uint64_t next_request_id_ = 1;
};

}  // namespace vc

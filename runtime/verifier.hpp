// The verify pass of one request and its acceptance rule, as a plain object (the
// verifier actor and the single-request generator both use it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/forward.hpp"
#include "kvtiers/compressor.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/sampler.hpp"

namespace vc {

struct VerifyJob {
  uint64_t id = 0;
  int32_t t0 = 0;                // the pending token (emitted, KV not yet verified)
  size_t p0 = 0;                 // its position; the full tier holds [0, p0)
  std::vector<int32_t> drafts;   // L drafts for positions p0+1 .. p0+L
  SamplingParams sampling;
  /// Gather the pass's attention statistics (for re-compressing the view).
  bool collect_stats = false;
  /// When set, run it on every row's hidden states and return the scores of the
  /// committed rows (VerifyOutcome::hidden_scores): KVzap scores tokens as they come.
  std::shared_ptr<const HiddenScorer> hidden = nullptr;
};

struct VerifyOutcome {
  uint64_t id = 0;
  /// The verifier's tokens for positions p0+1 .. p0+accepted+1: the accepted drafts,
  /// then the correction (or the bonus token when every draft matched).
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  /// With sampling.top_logprobs > 0: per token, its top-N list (token_logprobs).
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<std::vector<float>> logits;  // per token, when kept
  size_t accepted = 0;
  /// Verified KV of positions p0 .. p0+accepted (t0 and the accepted drafts), fp32,
  /// [layers][accepted + 1][kv_heads * head_dim] each.
  std::vector<float> rows_k, rows_v;
  size_t row_floats = 0;
  double seconds = 0;       // run_batch: the pass's time / the jobs in it
  double wait_seconds = 0;  // of which waiting for full-KV layers
  size_t shared_by = 1;     // the requests whose rows shared the pass (run_batch)
  /// With a hidden scorer: the scores of positions p0 .. p0+accepted,
  /// [layers][outputs][accepted + 1].
  std::vector<float> hidden_scores;
  /// With collect_stats: the verified rows' attention to positions [0, p0), as
  /// the statistics a compressor needs to re-compress [0, p0).
  std::shared_ptr<const PrefillStats> stats;

  [[nodiscard]] const float* k(size_t layer, size_t r) const {
    return &rows_k[(layer * (accepted + 1) + r) * row_floats];
  }
  [[nodiscard]] const float* v(size_t layer, size_t r) const {
    return &rows_v[(layer * (accepted + 1) + r) * row_floats];
  }
};

class Verifier {
 public:
  Verifier(std::shared_ptr<const Model> model, int threads);

  /// One pass over rows t0, d1..dL attending over the full KV that `stream` brings
  /// in layer by layer (already started for this job) and themselves; then the
  /// greedy / Gumbel-coupled acceptance. Throws vc::Error when the full KV cannot
  /// be read.
  [[nodiscard]] VerifyOutcome run(const VerifyJob& job, LayerStreamer& stream,
                                  bool keep_logits = false);
  /// Several requests' verify passes as one forward: job j's rows attend over
  /// streams[j] (started for it), and the weights are read once for all rows. Each
  /// outcome is bit for bit what run() gives for the job alone (batch-invariant
  /// kernels); its `seconds` is the pass's time split evenly among the jobs, its
  /// wait_seconds its own stream's. Jobs that gather statistics or hidden scores
  /// (collect_stats, hidden) must run alone. Throws vc::Error when any request's
  /// full KV cannot be read (the caller retries the jobs one by one to find which).
  [[nodiscard]] std::vector<VerifyOutcome> run_batch(std::span<const VerifyJob> jobs,
                                                     std::span<LayerStreamer* const> streams,
                                                     bool keep_logits = false);
  /// Runs f(t) on each of the verifier's compute threads (t = 0: the calling
  /// thread), for thread binding.
  void run_on_each_thread(const std::function<void(int thread)>& f) { ws_.pool().run_on_each(f); }

 private:
  std::shared_ptr<const Model> model_;
  Workspace ws_;
  PagedKvCache unused_cache_;  // forward() wants one; the provider replaces it
  /// The pass's rows of `job` (t0, then its drafts), appended to rows_.
  void append_rows(const VerifyJob& job);
  /// Acceptance and the verified KV of job j, whose logits are rows [row0, ...).
  VerifyOutcome accept(const VerifyJob& job, const LayerStreamer& stream, size_t row0,
                       bool keep_logits) const;

  std::vector<ForwardRow> rows_;
  std::vector<float> logits_;
};

}  // namespace vc

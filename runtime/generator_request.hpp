// Internal to the generator: one request's state while it decodes, and the one
// place that emits tokens and decides when to stop (shared by every mode, so every
// mode stops on exactly the same token).
#pragma once
#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "runtime/generator.hpp"
#include "runtime/hidden_score_log.hpp"
#include "runtime/stop_rule.hpp"

namespace vc {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Generator::Request {
  const Model& model;
  const Tokenizer* tokenizer;
  const GenerateOptions& opt;
  const TokenCallback& on_token;
  PagedKvCache& cache;
  size_t prompt_size;
  int steps;  // tokens to emit at most
  GenerateResult result;
  KvSequence seq;                      // the full KV (full mode) or the draft tail
  std::vector<float> logits;           // the next token's logits
  std::optional<CompressedView> view;  // lossy and vericache
  std::unique_ptr<Compressor> compressor;
  /// Hidden-state scores of every verified position (KVzap), for folds.
  HiddenScoreLog hidden_log;
  std::shared_ptr<const HiddenScorer> scorer;  // KVzap's surrogate (the compressor's)
  StopRule stop_rule;
  bool done = false;
  FullTier* tier = nullptr;  // holds the request's full KV (vericache) while set
  uint64_t tier_id = 0;
  FastCharge view_charge;    // the view's held bytes in the fast-memory budget
  /// Compressed-first remote flow: the drafter's guess of the first token, then
  /// the drafts after it, made while the full KV arrived (their KV is in the tail);
  /// decode_verified uses them when the verifier's first token equals the guess.
  std::vector<int32_t> predraft;
  /// Folds count the tail from here: the prompt's length when the view came from
  /// the store (the suffix in the tail has its own reservation, and a fold scored by
  /// the first round's few verify rows drafts worse than the prompt-scored view).
  size_t fold_from = 0;
  /// The fast-memory budget has room for the compressed-first flow's suffix (a
  /// chunk's); suffix_room: the bytes it has for the suffix's tail blocks (a longer
  /// suffix than they hold takes the full flow).
  bool compressed_first_fits = true;
  size_t suffix_room = std::numeric_limits<size_t>::max();
  size_t kv_peak = 0;        // the most view + blocks held
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  Request(const Model& m, const Tokenizer* tok, PagedKvCache& c, std::span<const int32_t> prompt,
          const GenerateOptions& o, const TokenCallback& cb)
      : model(m), tokenizer(tok), opt(o), on_token(cb), cache(c), prompt_size(prompt.size()),
        steps(o.forced_output.empty() ? o.max_tokens : int(o.forced_output.size())) {
    result.prompt_ids.assign(prompt.begin(), prompt.end());
    result.finish_reason = "length";
    stop_rule.max_tokens = size_t(steps);
    if (o.stop_at_eos) {
      if (!o.eos_token_ids.empty()) stop_rule.eos_ids = o.eos_token_ids;
      else
        for (int e : m.config().eos_token_ids) stop_rule.eos_ids.push_back(e);
    }
    stop_rule.stop = o.stop;
    stop_rule.tokenizer = tok;
  }
  ~Request() {  // blocks go back to the pool, and the tier entry, on every exit path
    cache.free(seq);
    if (tier != nullptr) tier->release_if_present(tier_id);
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  /// The token for output index i at absolute position `position`.
  [[nodiscard]] int32_t choose(std::span<const float> lg, int64_t position, size_t i) const {
    return opt.forced_output.empty() ? sample_token(lg, opt.sampling, position)
                                     : opt.forced_output[i];
  }

  /// The logprobs reported for `tok` drawn from logits `lg`.
  [[nodiscard]] TokenLogprobs logprobs_of(std::span<const float> lg, int32_t tok) const {
    return token_logprobs(lg, tok, size_t(opt.sampling.top_logprobs));
  }

  /// The first token, chosen from the prompt's exact logits and emitted as soon as
  /// they exist (PromptLogitsHook), before the view is built: the decode loops then
  /// begin after it (first_emitted). The same token as choosing it there.
  bool emit_first(std::span<const float> lg) {
    first_token = choose(lg, int64_t(prompt_size), 0);
    first_emitted = true;
    return emit(first_token, logprobs_of(lg, first_token), lg);
  }
  bool first_emitted = false;
  int32_t first_token = -1;

  /// Appends one output token; returns true when generation must stop after it.
  bool emit(int32_t tok, TokenLogprobs lp, std::span<const float> lg) {
    if (opt.keep_logits) result.step_logits.insert(result.step_logits.end(), lg.begin(), lg.end());
    result.output_ids.push_back(tok);
    if (result.output_ids.size() == 1) result.stats.time_to_first_token_seconds = seconds_since(start);
    result.output_logprobs.push_back(lp.logprob);
    if (opt.sampling.top_logprobs > 0) result.output_top_logprobs.push_back(std::move(lp.top));
    if (on_token && !on_token(tok)) {
      result.finish_reason = "cancelled";
      return done = true;
    }
    const std::string reason = stop_rule.check(result.output_ids);
    if (!reason.empty()) result.finish_reason = reason;
    return done = !reason.empty();
  }

  /// Bytes one draft step reads from fast memory: the view and the paged tail.
  [[nodiscard]] size_t draft_step_bytes(const PagedKvCache& c) const {
    const size_t tail = seq.length > view->covered() ? seq.length - view->covered() : 0;
    return view->stored_bytes() + tail * c.bytes_per_token();
  }

  /// Bytes of fast memory the request's KV holds now: the view and its blocks.
  [[nodiscard]] size_t fast_kv_bytes(const PagedKvCache& c) const {
    size_t blocks = 0;
    for (int32_t b : seq.blocks) blocks += b >= 0 ? 1 : 0;
    return (view ? view->held_bytes() : 0) + blocks * c.block_bytes();
  }
  void note_fast(const PagedKvCache& c) { kv_peak = std::max(kv_peak, fast_kv_bytes(c)); }
  /// Final stats and text.
  void finish(const PagedKvCache& c) {
    GenerateStats& s = result.stats;
    s.output_tokens = result.output_ids.size();
    s.kv_bytes = c.bytes_of(seq);
    if (tokenizer != nullptr) {
      result.text = stop_rule.cut(tokenizer->decode(result.output_ids, /*skip_special=*/true));
    }
  }
};

}  // namespace vc

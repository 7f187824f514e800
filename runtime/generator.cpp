// One request end to end: validate, prefill (gathering statistics when the
// compressor needs them), build the compressed view (lossy, vericache), then decode
// step by step (full, lossy) or by draft-and-verify rounds (vericache_decode.cpp).
#include "runtime/generator.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/compression.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/generator_request.hpp"
#include "runtime/kvzap_file.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/remote_prefix.hpp"
#include "runtime/streamed_prefill.hpp"
#include "runtime/verifier.hpp"

namespace vc {

namespace {

size_t context_limit(const Model& m, const GeneratorConfig& cfg) {
  const size_t model_max = m.config().context_length();
  return cfg.max_context > 0 ? std::min(cfg.max_context, model_max) : model_max;
}

}  // namespace

DecodeMode parse_decode_mode(const std::string& s) {
  if (s == "full") return DecodeMode::full;
  if (s == "lossy") return DecodeMode::lossy;
  if (s == "vericache") return DecodeMode::vericache;
  throw Error("mode: '" + s + "' is not one of full, lossy, vericache");
}

const char* decode_mode_name(DecodeMode m) {
  switch (m) {
    case DecodeMode::full:
      return "full";
    case DecodeMode::lossy:
      return "lossy";
    case DecodeMode::vericache:
      return "vericache";
  }
  return "?";
}

Generator::Generator(std::shared_ptr<const Model> model,
                     std::shared_ptr<const Tokenizer> tokenizer, const GeneratorConfig& cfg)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), cfg_(cfg), ws_(cfg.threads),
      cache_(model_->kv_config(context_limit(*model_, cfg), cfg.kv_dtype, cfg.block_tokens)),
      fast_(std::make_unique<FastMemory>(cfg.fast_memory_bytes)) {
  cache_.set_budget(fast_.get());
  if (cfg.full_tier != "host" && cfg.full_tier != "disk")
    throw Error("full tier: '" + cfg.full_tier + "' is not one of host, disk");
  if (!cfg.remote_url.empty())  // a bad URL fails here, in one line
    remote_ = open_remote_tier({cfg.remote_url, cfg.remote_chunk_tokens, cfg.remote_ttl_seconds,
                                cfg.remote_timeout_ms, cfg.remote_retry_ms,
                                model_->tp() ? size_t(model_->tp()->rank) : 0,
                                model_->tp() ? size_t(model_->tp()->degree) : 1, model_->numerics()},
                               cache_.config(), model_->dir());
}

Generator::~Generator() = default;

GenerateResult Generator::generate(const std::string& prompt, const GenerateOptions& opt,
                                   const TokenCallback& on_token) {
  if (!tokenizer_) throw Error("generate: a text prompt needs a tokenizer");
  const std::vector<int32_t> ids = tokenizer_->encode(prompt);
  return generate(ids, opt, on_token);
}

GenerateResult Generator::generate(std::span<const int32_t> prompt_ids,
                                   const GenerateOptions& opt, const TokenCallback& on_token) {
  const ModelConfig& c = model_->config();
  validate(opt.sampling);
  if (prompt_ids.empty()) throw Error("generate: the prompt has no tokens");
  if (opt.max_tokens < 0) throw Error("generate: max_tokens must be >= 0");
  if (!opt.stop.empty() && !tokenizer_) throw Error("generate: stop strings need a tokenizer");
  if (opt.mode == DecodeMode::vericache && !opt.forced_output.empty())
    throw Error("generate: teacher forcing is not available in vericache mode");
  const size_t limit = context_limit(*model_, cfg_);
  if (prompt_ids.size() + std::max(size_t(opt.max_tokens), opt.forced_output.size()) > limit)
    throw Error("generate: prompt (" + std::to_string(prompt_ids.size()) + " tokens) + max_tokens (" +
                std::to_string(opt.max_tokens) + ") exceeds the context limit of " +
                std::to_string(limit));
  for (int32_t t : prompt_ids)
    if (t < 0 || t >= c.vocab_size)
      throw Error("generate: prompt token id " + std::to_string(t) +
                  " is outside the vocabulary (" + std::to_string(c.vocab_size) + ")");

  Request rq(*model_, tokenizer_.get(), cache_, prompt_ids, opt, on_token);
  std::unique_ptr<Compressor>& compressor = rq.compressor;
  if (opt.mode != DecodeMode::full) {
    // A bad name or parameter fails before any work.
    compressor = make_compressor(opt.compressor, opt.compressor_params);
    rq.scorer = attach_model_files(*compressor, *model_);  // KVzap; a missing file fails here
    if (!(opt.ratio >= 1.0)) throw Error("generate: ratio must be >= 1");
  }
  GenerateStats& s = rq.result.stats;
  s.prompt_tokens = prompt_ids.size();
  if (fast_->limited()) {  // a request that cannot fit fails before any work
    DraftSpec spec = make_draft_spec(0, prompt_ids, opt);
    spec.max_new_tokens = size_t(rq.steps);
    const FastNeed need =
        fast_memory_need(spec, cache_.config(), opt.draft_auto ? opt.max_draft : opt.draft_length);
    const size_t staging =
        opt.mode == DecodeMode::full ? 0 : engine_fast_overhead(cache_.config(), cfg_.stage_positions) / 2;
    if (need.total() + staging > fast_->capacity())
      throw Error("generate: the request needs " + need.describe() + " of fast memory + " +
                  format_bytes(staging) + " of staging, more than the budget of " +
                  format_bytes(fast_->capacity()));
    // Compressed first leaves a suffix of up to one chunk in the tail, beside the
    // bound above (as the engine reserves it); without room for it, the full flow.
    if (remote_ && opt.mode != DecodeMode::full) {
      const size_t suffix = tail_blocks_bytes(cache_.config(), remote_->layout().chunk_tokens);
      rq.compressed_first_fits = need.total() + staging + suffix <= fast_->capacity();
      rq.suffix_room = rq.compressed_first_fits ? fast_->capacity() - need.total() - staging : 0;
    }
  }
  // The full tier's budget, as the engine checks it at submit: a request whose full
  // KV cannot fit fails before any work, not in the middle of its prefill.
  if (opt.mode != DecodeMode::full && cfg_.full_tier_bytes > 0) {
    ensure_full_tier();
    const size_t need = (prompt_ids.size() + size_t(rq.steps) + 1) * full_tier_->bytes_per_token();
    if (need > cfg_.full_tier_bytes)
      throw Error("generate: the request's full KV needs " + format_bytes(need) + " in the " +
                  std::string(full_tier_->kind()) + " full tier, more than its budget of " +
                  format_bytes(cfg_.full_tier_bytes));
  }
  fast_->reset_peak();
  if (rq.steps > 0) {
    PrefilledRequest p;
    if (opt.mode == DecodeMode::full) {
      p = prefill_request(*model_, prompt_ids, rq.seq, cache_, ws_, nullptr, opt.ratio,
                          opt.stats_window, opt.prefill_chunk);
    } else {
      // The prompt's KV goes to the full tier, never to fast memory; lossy mode
      // drops it once the view is built.
      ensure_full_tier();
      rq.tier_id = next_request_id_++;
      full_tier_->create(rq.tier_id, prompt_ids.size() + size_t(rq.steps));
      rq.tier = full_tier_.get();
      // The first token goes out once the exact logits exist, before the view is
      // built (and, remote, before the chunks are published).
      const PromptLogitsHook first = [&rq](std::span<const float> lg) { (void)rq.emit_first(lg); };
      p = remote_ ? prefill_with_remote(rq, prompt_ids, first)
                  : prefill_compressed(*model_, prompt_ids, rq.seq, cache_, ws_, *compressor,
                                       opt.ratio, opt.stats_window, opt.prefill_chunk,
                                       *full_tier_, *streamer_, rq.tier_id, 0, first);
      if (opt.mode == DecodeMode::lossy) {
        full_tier_->release(rq.tier_id);
        rq.tier = nullptr;
      }
    }
    rq.logits = std::move(p.logits);
    if (!p.hidden_scores.empty()) {  // KVzap: new tokens are scored as they are verified
      const ModelConfig& mc = model_->whole_config();  // the scores are model-wide
      rq.hidden_log = HiddenScoreLog(size_t(mc.num_layers), size_t(mc.num_heads),
                                     size_t(mc.num_kv_heads), size_t(mc.head_dim),
                                     compressor->hidden_scorer()->outputs());
      rq.hidden_log.append(p.hidden_scores, prompt_ids.size());
    }
    if (p.view) rq.view = std::move(p.view);  // the compressed-first flow set rq.view itself
    if (rq.view) rq.view_charge = FastCharge(fast_.get(), rq.view->held_bytes(), "the compressed view");
    rq.note_fast(cache_);
    s.prefill_seconds = p.prefill_seconds;
    s.compress_seconds = p.compress_seconds;
    if (rq.view) {
      s.compressed_bytes = rq.view->stored_bytes();
      s.compressed_full_bytes = rq.view->full_bytes();
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  if (opt.mode == DecodeMode::vericache && rq.steps > 0) decode_verified(rq);
  else decode_stepwise(rq);
  rq.result.stats.decode_seconds = seconds_since(t0);
  rq.note_fast(cache_);
  rq.result.stats.fast_kv_bytes_peak = rq.kv_peak;
  rq.result.stats.fast_bytes_peak = fast_->peak();
  rq.finish(cache_);
  return std::move(rq.result);
}

void Generator::decode_stepwise(Request& rq) {
  std::vector<ForwardRow> row(1);
  for (int i = 0; i < rq.steps; ++i) {
    const int64_t position = int64_t(rq.prompt_size) + i;
    const bool sent = i == 0 && rq.first_emitted;  // emitted during the prefill
    const int32_t tok = sent ? rq.first_token : rq.choose(rq.logits, position, size_t(i));
    if (sent ? rq.done : rq.emit(tok, rq.logprobs_of(rq.logits, tok), rq.logits)) return;
    if (i + 1 == rq.steps) return;
    cache_.reserve(rq.seq, size_t(position) + 1);
    rq.note_fast(cache_);
    row[0] = ForwardRow{tok, int32_t(position), &rq.seq, true, rq.view ? &*rq.view : nullptr};
    forward(*model_, row, cache_, ws_, rq.logits);
    if (rq.view) rq.result.stats.compressed_bytes_read += rq.draft_step_bytes(cache_);
  }
}

}  // namespace vc

// Prefill + token-by-token decode with stop conditions and timing.
#include "runtime/generator.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "runtime/compression.hpp"
#include "runtime/prefill_stats.hpp"

namespace vc {

namespace {

size_t context_limit(const Model& m, const GeneratorConfig& cfg) {
  const size_t model_max = size_t(m.config().max_position_embeddings);
  return cfg.max_context > 0 ? std::min(cfg.max_context, model_max) : model_max;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(std::shared_ptr<const Model> model,
                     std::shared_ptr<const Tokenizer> tokenizer, const GeneratorConfig& cfg)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), cfg_(cfg), ws_(cfg.threads),
      cache_(model_->kv_config(context_limit(*model_, cfg), cfg.kv_dtype, cfg.block_tokens)) {}

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
  const size_t limit = context_limit(*model_, cfg_);
  if (prompt_ids.size() + std::max(size_t(opt.max_tokens), opt.forced_output.size()) > limit)
    throw Error("generate: prompt (" + std::to_string(prompt_ids.size()) + " tokens) + max_tokens (" +
                std::to_string(opt.max_tokens) + ") exceeds the context limit of " +
                std::to_string(limit));

  GenerateResult r;
  r.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
  r.finish_reason = "length";
  KvSequence seq;
  struct Release {  // the request's blocks go back to the pool on every exit path
    PagedKvCache& cache;
    KvSequence& seq;
    ~Release() { cache.free(seq); }
  } release{cache_, seq};

  const int steps = opt.forced_output.empty() ? opt.max_tokens : int(opt.forced_output.size());
  std::unique_ptr<Compressor> compressor;
  std::optional<PrefillStatsCollector> collector;
  if (opt.mode == DecodeMode::lossy) {
    compressor = make_compressor(opt.compressor);  // a bad name fails before any work
    if (!(opt.ratio >= 1.0)) throw Error("generate: ratio must be >= 1");
    if (compressor->needs_stats()) {
      collector.emplace(c, prompt_ids.size(), opt.stats_window);
      ws_.stats = &*collector;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  try {
    if (steps > 0) logits = prefill(*model_, prompt_ids, seq, cache_, ws_, opt.prefill_chunk);
  } catch (...) {
    ws_.stats = nullptr;
    throw;
  }
  ws_.stats = nullptr;
  r.stats.prefill_seconds = seconds_since(t0);
  r.stats.prompt_tokens = prompt_ids.size();

  std::optional<CompressedView> view;
  if (compressor && steps > 0) {
    t0 = std::chrono::steady_clock::now();
    std::optional<PrefillStats> stats;
    if (collector) stats = collector->finish();
    const size_t n = prompt_ids.size();
    view = compress(*compressor, snapshot_kv(cache_, seq, n), stats ? &*stats : nullptr,
                    model_facts(*model_, n), opt.ratio);
    r.stats.compress_seconds = seconds_since(t0);
    r.stats.compressed_bytes = view->stored_bytes();
    r.stats.compressed_full_bytes = view->full_bytes();
  }

  t0 = std::chrono::steady_clock::now();
  std::vector<ForwardRow> row(1);
  const auto is_eos = [&](int32_t t) {
    for (int32_t e : opt.eos_token_ids)
      if (e == t) return true;
    if (!opt.eos_token_ids.empty()) return false;
    for (int e : c.eos_token_ids)
      if (e == t) return true;
    return false;
  };
  for (int i = 0; i < steps; ++i) {
    const int64_t position = int64_t(prompt_ids.size()) + i;
    if (opt.keep_logits) r.step_logits.insert(r.step_logits.end(), logits.begin(), logits.end());
    const int32_t tok = opt.forced_output.empty() ? sample_token(logits, opt.sampling, position)
                                                  : opt.forced_output[size_t(i)];
    r.output_ids.push_back(tok);
    r.output_logprobs.push_back(token_logprob(logits, tok));
    if (on_token && !on_token(tok)) {
      r.finish_reason = "cancelled";
      break;
    }
    if (opt.stop_at_eos && is_eos(tok)) {
      r.finish_reason = "eos";
      break;
    }
    if (!opt.stop.empty()) {
      const std::string text = tokenizer_->decode(r.output_ids);
      bool hit = false;
      for (const auto& s : opt.stop) hit = hit || (!s.empty() && text.find(s) != std::string::npos);
      if (hit) {
        r.finish_reason = "stop";
        break;
      }
    }
    if (i + 1 == steps) break;
    cache_.reserve(seq, size_t(position) + 1);
    row[0] = ForwardRow{tok, int32_t(position), &seq, true, view ? &*view : nullptr};
    forward(*model_, row, cache_, ws_, logits);
  }
  r.stats.decode_seconds = seconds_since(t0);
  r.stats.output_tokens = r.output_ids.size();
  r.stats.kv_bytes = cache_.bytes_of(seq);

  if (tokenizer_) {
    r.text = tokenizer_->decode(r.output_ids, /*skip_special=*/true);
    for (const auto& s : opt.stop) {
      const size_t at = s.empty() ? std::string::npos : r.text.find(s);
      if (at != std::string::npos) r.text.resize(at);
    }
  }
  return r;
}

}  // namespace vc

// Verify pass + acceptance: the verifier's draw at each position, until the first
// one that differs from the draft.
#include "runtime/verifier.hpp"

#include <chrono>
#include <optional>

#include "runtime/hidden_score_log.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/tp_stats.hpp"

namespace vc {

Verifier::Verifier(std::shared_ptr<const Model> model, int threads)
    : model_(std::move(model)), ws_(threads),
      unused_cache_(model_->kv_config(16, DType::bf16)) {}

VerifyOutcome Verifier::run(const VerifyJob& job, LayerStreamer& stream, bool keep_logits) {
  const auto t0 = std::chrono::steady_clock::now();
  const double wait0 = stream.wait_seconds();
  const size_t L = job.drafts.size();
  rows_.clear();
  rows_.push_back(ForwardRow{job.t0, int32_t(job.p0), nullptr, true});
  for (size_t i = 0; i < L; ++i)
    rows_.push_back(ForwardRow{job.drafts[i], int32_t(job.p0 + 1 + i), nullptr, true});
  std::optional<PrefillStatsCollector> collector;
  if (job.collect_stats || job.hidden != nullptr) {
    StatsNeeds needs = job.collect_stats ? PrefillStatsCollector::kVerifyNeeds : StatsNeeds{};
    needs.hidden = job.hidden != nullptr;
    collector.emplace(model_->config(), job.p0 + L + 1, L + 1, needs, nullptr, job.hidden.get(),
                      job.p0);
  }
  ws_.provider = &stream;
  ws_.stats = collector ? &*collector : nullptr;
  try {
    forward(*model_, rows_, unused_cache_, ws_, logits_);
  } catch (...) {
    ws_.provider = nullptr;
    ws_.stats = nullptr;
    throw;
  }
  ws_.provider = nullptr;
  ws_.stats = nullptr;

  VerifyOutcome out;
  out.id = job.id;
  const size_t V = size_t(model_->config().vocab_size);
  for (size_t j = 0; j <= L; ++j) {
    const std::span<const float> lg(&logits_[j * V], V);
    const int32_t v = sample_token(lg, job.sampling, int64_t(job.p0 + 1 + j));
    out.tokens.push_back(v);
    TokenLogprobs lp = token_logprobs(lg, v, size_t(job.sampling.top_logprobs));
    out.logprobs.push_back(lp.logprob);
    if (job.sampling.top_logprobs > 0) out.top_logprobs.push_back(std::move(lp.top));
    if (keep_logits) out.logits.emplace_back(lg.begin(), lg.end());
    if (j < L && v == job.drafts[j]) ++out.accepted;
    else break;
  }
  const size_t layers = size_t(model_->config().num_layers), n = out.accepted + 1;
  out.row_floats = size_t(model_->config().num_kv_heads * model_->config().head_dim);
  out.rows_k.resize(layers * n * out.row_floats);
  out.rows_v.resize(out.rows_k.size());
  for (size_t l = 0; l < layers; ++l)
    for (size_t r = 0; r < n; ++r) {
      std::copy_n(stream.row_k(l, r), out.row_floats, &out.rows_k[(l * n + r) * out.row_floats]);
      std::copy_n(stream.row_v(l, r), out.row_floats, &out.rows_v[(l * n + r) * out.row_floats]);
    }
  if (collector) {
    const PrefillStats s = job.collect_stats ? gather_stats(collector->finish(), *model_) : collector->finish();
    if (job.hidden != nullptr) out.hidden_scores = hidden_scores_of(s, job.p0, out.accepted + 1);
    if (job.collect_stats)
      out.stats = std::make_shared<const PrefillStats>(
          PrefillStatsCollector::trim(s, job.p0 + out.accepted + 1, job.p0));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.wait_seconds = stream.wait_seconds() - wait0;
  return out;
}

}  // namespace vc

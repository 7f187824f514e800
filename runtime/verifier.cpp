// Verify pass + acceptance: the verifier's draw at each position, until the first
// one that differs from the draft.
#include "runtime/verifier.hpp"

#include <chrono>
#include <optional>

#include "kernels/error.hpp"
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
  append_rows(job);
  std::optional<PrefillStatsCollector> collector;
  if (job.collect_stats || job.hidden != nullptr) {
    StatsNeeds needs = job.collect_stats ? PrefillStatsCollector::kVerifyNeeds : StatsNeeds{};
    needs.hidden = job.hidden != nullptr;
    collector.emplace(model_->config(), job.p0 + L + 1, L + 1, needs, nullptr, job.hidden.get(),
                      job.p0);
  }
  ws_.use_provider(stream, rows_.size());
  ws_.stats = collector ? &*collector : nullptr;
  try {
    forward(*model_, rows_, unused_cache_, ws_, logits_);
  } catch (...) {
    ws_.providers.clear();
    ws_.stats = nullptr;
    throw;
  }
  ws_.providers.clear();
  ws_.stats = nullptr;

  VerifyOutcome out = accept(job, stream, 0, keep_logits);
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

std::vector<VerifyOutcome> Verifier::run_batch(std::span<const VerifyJob> jobs,
                                               std::span<LayerStreamer* const> streams,
                                               bool keep_logits) {
  if (jobs.size() != streams.size())
    throw Error("verify: " + std::to_string(streams.size()) + " streams for " +
                std::to_string(jobs.size()) + " jobs");
  if (jobs.size() == 1) return {run(jobs[0], *streams[0], keep_logits)};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> wait0;
  rows_.clear();
  ws_.providers.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const VerifyJob& job = jobs[j];
    if (job.collect_stats || job.hidden != nullptr)
      throw Error("verify: request " + std::to_string(job.id) +
                  " gathers statistics, so its pass cannot be batched");
    wait0.push_back(streams[j]->wait_seconds());
    const size_t begin = rows_.size();
    append_rows(job);
    ws_.providers.push_back({streams[j], begin, rows_.size()});
  }
  try {
    forward(*model_, rows_, unused_cache_, ws_, logits_);
  } catch (...) {
    ws_.providers.clear();
    throw;
  }
  std::vector<size_t> row0;
  for (const ProvidedRows& p : ws_.providers) row0.push_back(p.begin);
  ws_.providers.clear();
  std::vector<VerifyOutcome> out;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t j = 0; j < jobs.size(); ++j) {
    out.push_back(accept(jobs[j], *streams[j], row0[j], keep_logits));
    out.back().seconds = seconds / double(jobs.size());
    out.back().shared_by = jobs.size();
    out.back().wait_seconds = streams[j]->wait_seconds() - wait0[j];
  }
  return out;
}

void Verifier::append_rows(const VerifyJob& job) {
  rows_.push_back(ForwardRow{job.t0, int32_t(job.p0), nullptr, true});
  for (size_t i = 0; i < job.drafts.size(); ++i)
    rows_.push_back(ForwardRow{job.drafts[i], int32_t(job.p0 + 1 + i), nullptr, true});
}

VerifyOutcome Verifier::accept(const VerifyJob& job, const LayerStreamer& stream, size_t row0,
                               bool keep_logits) const {
  VerifyOutcome out;
  out.id = job.id;
  const size_t L = job.drafts.size();
  const size_t V = size_t(model_->config().vocab_size);
  for (size_t j = 0; j <= L; ++j) {
    const std::span<const float> lg(&logits_[(row0 + j) * V], V);
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
  return out;
}

}  // namespace vc

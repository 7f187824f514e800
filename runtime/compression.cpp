// Snapshots of a request's KV (from the cache or the full tier), model facts, and
// building or rebuilding its compressed view.
#include "runtime/compression.hpp"

#include <chrono>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "runtime/prefill_stats.hpp"

namespace vc {

namespace {

// An empty snapshot of n positions shaped like `c`.
KvSnapshot make_snapshot(const KvCacheConfig& c, size_t n) {
  KvSnapshot s;
  s.layers = c.num_layers;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.n_pos = n;
  s.k.resize(s.layers * s.kv_heads * n * s.head_dim);
  s.v.resize(s.k.size());
  return s;
}

}  // namespace

KvSnapshot snapshot_kv(const PagedKvCache& cache, const KvSequence& seq, size_t n_pos) {
  const KvCacheConfig& c = cache.config();
  if (n_pos > seq.length)
    throw Error("snapshot_kv: " + std::to_string(n_pos) + " positions asked, the sequence holds " +
                std::to_string(seq.length));
  KvSnapshot s = make_snapshot(c, n_pos);
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  for (size_t l = 0; l < s.layers; ++l)
    for (size_t p = 0; p < n_pos; ++p) {
      cache.read(l, seq, p, k.data(), v.data());
      for (size_t g = 0; g < s.kv_heads; ++g) {
        std::copy_n(&k[g * s.head_dim], s.head_dim, &s.k[s.index(l, g, p)]);
        std::copy_n(&v[g * s.head_dim], s.head_dim, &s.v[s.index(l, g, p)]);
      }
    }
  return s;
}

ModelFacts model_facts(const Model& model, size_t n_pos) {
  ModelFacts f;
  f.heads = size_t(model.config().num_heads);
  f.rope_inv_freq = model.rope_inv_freq();
  f.positions.resize(n_pos);
  for (size_t p = 0; p < n_pos; ++p) f.positions[p] = int32_t(p);
  for (const auto& l : model.weights().layers)
    f.wo.push_back({l.wo.data, l.wo.dtype, l.wo.rows, l.wo.cols});
  return f;
}

CompressedView compress(const Compressor& compressor, const KvSnapshot& kv,
                        const PrefillStats* stats, const ModelFacts& facts, double ratio) {
  if (compressor.needs_stats() && stats == nullptr)
    throw Error("compressor '" + std::string(compressor.name()) +
                "' needs prefill statistics, and none were gathered");
  const CompressorInput in{kv, stats, facts, ratio};
  const CompressionPlan plan = compressor.plan(in);
  return CompressedView::build(kv, plan, compressor, facts);
}



KvSnapshot snapshot_full_tier(FullTier& tier, uint64_t id, size_t n) {
  const KvCacheConfig& c = tier.config();
  KvSnapshot s = make_snapshot(c, n);
  KvStaging staging(c);
  const size_t bt = c.block_tokens, D = c.head_dim, esz = dtype_size(c.dtype);
  for (size_t l = 0; l < s.layers; ++l) {
    tier.read_layer(id, l, n, staging);
    for (size_t g = 0; g < s.kv_heads; ++g)
      for (size_t p = 0; p < n; ++p) {
        const size_t off = (((p / bt) * c.kv_heads + g) * bt + p % bt) * D * esz;
        to_f32(c.dtype, static_cast<const std::byte*>(staging.k()) + off, &s.k[s.index(l, g, p)], D);
        to_f32(c.dtype, static_cast<const std::byte*>(staging.v()) + off, &s.v[s.index(l, g, p)], D);
      }
  }
  return s;
}

std::optional<CompressedView> refold(const Compressor& compressor, FullTier& tier, uint64_t id,
                                     size_t n, const PrefillStats* stats, const Model& model,
                                     double ratio) {
  if (compressor.needs_stats() && (stats == nullptr || stats->window == 0)) return std::nullopt;
  return compress(compressor, snapshot_full_tier(tier, id, n), stats, model_facts(model, n), ratio);
}

PrefilledRequest prefill_request(const Model& model, std::span<const int32_t> prompt,
                                 KvSequence& seq, PagedKvCache& cache, Workspace& ws,
                                 const Compressor* compressor, double ratio, size_t stats_window,
                                 size_t prefill_chunk) {
  using clock = std::chrono::steady_clock;
  PrefilledRequest out;
  std::optional<PrefillStatsCollector> collector;
  if (compressor != nullptr && compressor->needs_stats())
    collector.emplace(model.config(), prompt.size(), stats_window);
  auto t0 = clock::now();
  ws.stats = collector ? &*collector : nullptr;
  try {
    out.logits = prefill(model, prompt, seq, cache, ws, prefill_chunk);
  } catch (...) {
    ws.stats = nullptr;
    throw;
  }
  ws.stats = nullptr;
  out.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (compressor != nullptr) {
    t0 = clock::now();
    std::optional<PrefillStats> stats;
    if (collector) stats = collector->finish();
    out.view = compress(*compressor, snapshot_kv(cache, seq, prompt.size()),
                        stats ? &*stats : nullptr, model_facts(model, prompt.size()), ratio);
    out.compress_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  }
  return out;
}

}  // namespace vc

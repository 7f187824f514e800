// Chunked prefill over a full tier (see the header).
#include "runtime/streamed_prefill.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/tp_stats.hpp"

namespace vc {

std::vector<float> prefill_to_tier(const Model& model, std::span<const int32_t> prompt,
                                   uint64_t id, FullTier& tier, LayerStreamer& stream,
                                   PagedKvCache& scratch, Workspace& ws, size_t chunk) {
  if (prompt.empty()) throw Error("prefill: the prompt has no tokens");
  if (chunk == 0) chunk = prompt.size();
  const size_t layers = size_t(model.config().num_layers);
  const size_t start = tier.length(id);
  std::vector<ForwardRow> rows;
  std::vector<float> logits;
  // Compression and drafting run without the staging buffers, and a prefill that
  // throws (or is cancelled between chunks) leaves none behind in the budget.
  struct Restore {
    Workspace& ws;
    LayerStreamer& stream;
    ~Restore() {
      ws.providers.clear();
      stream.free_buffers();
    }
  } restore{ws, stream};
  const PromptRows prompt_rows(ws);
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    between_prefill_chunks(ws);
    const size_t e = std::min(prompt.size(), b + chunk);
    rows.clear();
    for (size_t i = b; i < e; ++i)
      rows.push_back(ForwardRow{prompt[i], int32_t(start + i), nullptr, i + 1 == prompt.size()});
    stream.start(id, start + b, e - b, /*whole_layers=*/ws.stats != nullptr && ws.stats->needs_keys());
    ws.use_provider(stream, rows.size());
    forward(model, rows, scratch, ws, logits);
    ws.providers.clear();
    for (size_t r = 0; r < e - b; ++r)
      for (size_t l = 0; l < layers; ++l)
        tier.write(id, l, start + b + r, stream.row_k(l, r), stream.row_v(l, r));
  }
  return logits;
}

bool prefill_stats_need_whole_layers(const Compressor& c) { return c.stats_needs().accumulated; }

bool verify_stats_need_whole_layers(const Compressor&) {
  return false;  // a verify pass gathers its rows' queries only (kVerifyNeeds)
}

PrefilledRequest prefill_compressed(const Model& model, std::span<const int32_t> prompt,
                                    KvSequence& seq, PagedKvCache& cache, Workspace& ws,
                                    const Compressor& compressor, double ratio,
                                    size_t stats_window, size_t prefill_chunk, FullTier& tier,
                                    LayerStreamer& stream, uint64_t id, size_t cached,
                                    const PromptLogitsHook& on_logits) {
  PrefilledRequest out = prefill_and_compress(model, prompt, cache, ws, compressor, ratio,
                                              stats_window, prefill_chunk, tier, stream, id, cached,
                                              on_logits);
  cache.start_at(seq, prompt.size());
  return out;
}

PrefilledRequest prefill_and_compress(const Model& model, std::span<const int32_t> prompt,
                                      PagedKvCache& cache, Workspace& ws,
                                      const Compressor& compressor, double ratio,
                                      size_t stats_window, size_t prefill_chunk, FullTier& tier,
                                      LayerStreamer& stream, uint64_t id, size_t cached,
                                      const PromptLogitsHook& on_logits) {
  if (cached >= prompt.size() || tier.length(id) != cached)
    throw Error("prefill: " + std::to_string(cached) + " cached positions of a " +
                std::to_string(prompt.size()) + "-token prompt, the tier holds " +
                std::to_string(tier.length(id)));
  using clock = std::chrono::steady_clock;
  PrefilledRequest out;
  std::optional<PrefillStatsCollector> collector;
  if (compressor.needs_stats())
    collector.emplace(model.config(), prompt.size(), stats_window, compressor.stats_needs(),
                      &ws.pool(), compressor.hidden_scorer());
  auto t0 = clock::now();
  ws.stats = collector ? &*collector : nullptr;
  try {
    out.logits = prefill_to_tier(model, prompt.subspan(cached), id, tier, stream, cache, ws,
                                 prefill_chunk);
  } catch (...) {
    ws.stats = nullptr;
    throw;
  }
  ws.stats = nullptr;
  out.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (on_logits) on_logits(out.logits);
  t0 = clock::now();
  std::optional<PrefillStats> stats;
  if (collector) stats = gather_stats(collector->finish(), model);
  // Compression reads the prompt's KV back a layer at a time: with a chunk hook (a
  // sliced prefill) it yields before each layer too, so that the view's building is
  // not one long piece after the last chunk.
  const LayerKvReader read = yielding_reader(tier_layer_reader(tier, id), ws);
  out.view = compress_layers(compressor, prompt.size(), read, stats ? &*stats : nullptr,
                             model_facts(model, prompt.size()), ratio,
                             compression_slice_heads(tier.config()));
  out.compress_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (stats && !stats->hidden_scores.empty()) out.hidden_scores = std::move(stats->hidden_scores);
  return out;
}

}  // namespace vc

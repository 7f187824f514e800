// Readers of one layer of a request's KV (from the cache or the full tier), model
// facts, and building or rebuilding its compressed view layer by layer.
#include "runtime/compression.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/layer_compression.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/tp_stats.hpp"

namespace vc {

ModelFacts model_facts(const Model& model, size_t n_pos) {
  // A shard plans its KV heads as a slice of the whole model's (absolute head
  // indices, the whole o_proj, every query head's statistics: tp_stats.hpp).
  const TensorParallelRank* tp = model.tp();
  const Model& whole = tp != nullptr ? *tp->unsharded : model;
  const ModelConfig& c = whole.config();
  ModelFacts f;
  f.heads = size_t(c.num_heads);
  f.layers = size_t(c.num_layers);
  f.kv_heads = size_t(model.config().num_kv_heads);  // the KV this model (shard) holds
  f.head_dim = size_t(c.head_dim);
  f.rope_inv_freq = model.rope_inv_freq();
  f.positions.resize(n_pos);
  for (size_t p = 0; p < n_pos; ++p) f.positions[p] = int32_t(p);
  for (const auto& l : whole.weights().layers)
    f.wo.push_back({l.wo.data, l.wo.dtype, l.wo.rows, l.wo.cols});
  if (tp != nullptr) f.shards = tp->head_shards.get();
  return f;
}

void copy_tier_rows(FullTier& tier, uint64_t id, size_t from, size_t to, PagedKvCache& cache,
                    KvSequence& seq) {
  const KvCacheConfig& kc = cache.config();
  const size_t heads = kc.kv_heads, d = kc.head_dim;
  const LayerKvReader read = tier_layer_reader(tier, id);
  LayerKv layer;
  std::vector<float> k(heads * d), v(heads * d);
  for (size_t l = 0; l < kc.num_layers; ++l) {
    read(l, to, 0, heads, layer);
    for (size_t pos = from; pos < to; ++pos) {
      for (size_t h = 0; h < heads; ++h) {
        std::copy_n(layer.k_at(h, pos), d, &k[h * d]);
        std::copy_n(layer.v_at(h, pos), d, &v[h * d]);
      }
      cache.write(l, seq, pos, k.data(), v.data());
    }
  }
}

LayerKvReader tier_layer_reader(FullTier& tier, uint64_t id) {
  // Reads a layer a chunk of blocks at a time into one small staging buffer, reused
  // for every chunk and slice, and converts the slice's heads: the working memory
  // is the fp32 slice itself.
  static constexpr size_t kChunkBlocks = 16;
  auto staging = std::make_shared<KvStaging>(tier.config());
  return [&tier, id, staging](size_t layer, size_t n, size_t first_head, size_t heads,
                              LayerKv& out) {
    const KvCacheConfig& c = tier.config();
    if (first_head > c.kv_heads || heads > c.kv_heads - first_head)
      throw Error("tier_layer_reader: KV heads " + std::to_string(first_head) + "+" +
                  std::to_string(heads) + " of " + std::to_string(c.kv_heads));
    out.reshape(layer, heads, c.head_dim, n, first_head);
    const size_t bt = c.block_tokens, D = c.head_dim, esz = dtype_size(c.dtype);
    const size_t blocks = (n + bt - 1) / bt;
    staging->reserve(std::min(blocks, kChunkBlocks) * bt);
    for (size_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
      const size_t nb = std::min(kChunkBlocks, blocks - b0);
      tier.read_blocks(id, layer, b0, nb, staging->k(), staging->v());
      const auto* k = static_cast<const std::byte*>(staging->k());
      const auto* v = static_cast<const std::byte*>(staging->v());
      const size_t p_end = std::min(n, (b0 + nb) * bt);
      for (size_t g = 0; g < heads; ++g)
        for (size_t p = b0 * bt; p < p_end; ++p) {
          const size_t off = ((((p / bt) - b0) * c.kv_heads + first_head + g) * bt + p % bt) * D * esz;
          to_f32(c.dtype, k + off, &out.k[out.index(g, p)], D);
          to_f32(c.dtype, v + off, &out.v[out.index(g, p)], D);
        }
    }
  };
}

LayerKvReader cache_layer_reader(const PagedKvCache& cache, const KvSequence& seq) {
  return [&cache, &seq](size_t layer, size_t n, size_t first_head, size_t heads, LayerKv& out) {
    const KvCacheConfig& c = cache.config();
    if (n > seq.length)
      throw Error("cache_layer_reader: " + std::to_string(n) +
                  " positions asked, the sequence holds " + std::to_string(seq.length));
    if (first_head > c.kv_heads || heads > c.kv_heads - first_head)
      throw Error("cache_layer_reader: KV heads " + std::to_string(first_head) + "+" +
                  std::to_string(heads) + " of " + std::to_string(c.kv_heads));
    out.reshape(layer, heads, c.head_dim, n, first_head);
    std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
    for (size_t p = 0; p < n; ++p) {
      cache.read(layer, seq, p, k.data(), v.data());
      for (size_t g = 0; g < heads; ++g) {
        std::copy_n(&k[(first_head + g) * c.head_dim], c.head_dim, &out.k[out.index(g, p)]);
        std::copy_n(&v[(first_head + g) * c.head_dim], c.head_dim, &out.v[out.index(g, p)]);
      }
    }
  };
}

size_t compression_slice_heads(const KvCacheConfig& c) {
  return slice_heads_for(c.kv_heads, dtype_size(c.dtype));
}

CompressedView compress_layers(const Compressor& c, size_t n, const LayerKvReader& read,
                               const PrefillStats* stats, const ModelFacts& facts,
                               double ratio, size_t slice_heads) {
  if (facts.layers == 0 || facts.kv_heads == 0 || facts.head_dim == 0)
    throw Error("compress_layers: ModelFacts lacks the KV shape (use model_facts())");
  if (c.needs_stats() && stats == nullptr)
    throw Error("compressor '" + std::string(c.name()) +
                "' needs prefill statistics, and none were gathered");
  const KvShape shape{facts.layers, facts.kv_heads, facts.head_dim, n};
  const StatsNeeds needs = c.stats_needs();
  LayerStatsSource layer_source;
  if (stats != nullptr && needs.any())
    layer_source = [stats, needs](const LayerKv& kv) { return layer_stats(*stats, kv, needs); };
  auto source = [&read, n](size_t layer, size_t first_head, size_t heads, LayerKv& out) {
    read(layer, n, first_head, heads, out);
  };
  return compress_by_layer(c, shape, source, layer_source, facts, ratio, slice_heads).view;
}

LayerKvReader yielding_reader(LayerKvReader read, Workspace& ws) {
  if (!ws.chunk_hook) return read;
  return [read = std::move(read), &ws, last = size_t(-1)](size_t layer, size_t n, size_t first_head,
                                                          size_t heads, LayerKv& kv) mutable {
    if (layer != last) {
      last = layer;
      between_prefill_chunks(ws);
    }
    read(layer, n, first_head, heads, kv);
  };
}

std::optional<CompressedView> refold(const Compressor& compressor, FullTier& tier, uint64_t id,
                                     size_t n, const PrefillStats* stats, const Model& model,
                                     double ratio, Workspace* ws) {
  const StatsNeeds needs = compressor.stats_needs();
  if (needs.hidden) {  // the surrogate's scores must cover every position
    if (stats == nullptr || stats->hidden_begin != 0 || stats->n_pos < n ||
        stats->hidden_scores.empty())
      return std::nullopt;
  } else if (compressor.needs_stats() && (stats == nullptr || stats->window == 0)) {
    return std::nullopt;
  }
  LayerKvReader read = tier_layer_reader(tier, id);
  if (ws != nullptr) read = yielding_reader(std::move(read), *ws);
  return compress_layers(compressor, n, read, stats, model_facts(model, n), ratio,
                         compression_slice_heads(tier.config()));
}

PrefilledRequest prefill_request(const Model& model, std::span<const int32_t> prompt,
                                 KvSequence& seq, PagedKvCache& cache, Workspace& ws,
                                 const Compressor* compressor, double ratio, size_t stats_window,
                                 size_t prefill_chunk) {
  using clock = std::chrono::steady_clock;
  PrefilledRequest out;
  std::optional<PrefillStatsCollector> collector;
  if (compressor != nullptr && compressor->needs_stats())
    collector.emplace(model.config(), prompt.size(), stats_window, compressor->stats_needs(),
                      &ws.pool(), compressor->hidden_scorer());
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
    if (collector) stats = gather_stats(collector->finish(), model);
    out.view = compress_layers(*compressor, prompt.size(), cache_layer_reader(cache, seq),
                               stats ? &*stats : nullptr, model_facts(model, prompt.size()),
                               ratio, compression_slice_heads(cache.config()));
    out.compress_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (stats && !stats->hidden_scores.empty()) out.hidden_scores = std::move(stats->hidden_scores);
  }
  return out;
}

}  // namespace vc

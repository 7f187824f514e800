// The passes of layer-by-layer compression (see layer_compression.hpp).
#include "kvtiers/layer_compression.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "kernels/error.hpp"

namespace vc {

namespace {

// The passes; without `build` only the plan (no codec runs).
LayerCompression run(const Compressor& c, const KvShape& shape, const LayerSource& read,
                     const LayerStatsSource& stats, const ModelFacts& facts, double ratio,
                     bool build) {
  if (!(ratio >= 1.0) || !std::isfinite(ratio))
    throw Error(std::string(c.name()) + ": compression ratio must be a finite number >= 1, got " +
                std::to_string(ratio));
  if (c.needs_stats() && !stats)
    throw Error("compressor '" + std::string(c.name()) +
                "' needs prefill statistics, and none were gathered");
  LayerKv kv;
  auto plan_one = [&](size_t l) {
    read(l, kv);
    if (kv.layer != l || kv.kv_heads != shape.kv_heads || kv.head_dim != shape.head_dim ||
        kv.n_pos != shape.n_pos)
      throw Error("compress_by_layer: the source gave layer " + std::to_string(kv.layer) +
                  " shaped (" + std::to_string(kv.kv_heads) + ", " + std::to_string(kv.n_pos) +
                  ", " + std::to_string(kv.head_dim) + ") for layer " + std::to_string(l) +
                  " of a (kv_heads, n_pos, head_dim) = (" + std::to_string(shape.kv_heads) +
                  ", " + std::to_string(shape.n_pos) + ", " + std::to_string(shape.head_dim) +
                  ") request");
    std::optional<LayerStats> st;
    if (c.needs_stats()) st = stats(kv);
    return c.plan_layer(LayerInput{kv, st ? &*st : nullptr, facts, shape.layers, ratio});
  };
  LayerCompression out;
  out.plan.keep.resize(shape.layers);
  const bool one_pass = !c.selects_globally() && (!c.quantizes() || c.keeps_every_position());
  if (one_pass) {
    // Storage known before any layer (bf16, or a quantizer keeping every position):
    // each layer is planned and built from one read.
    if (c.quantizes())
      out.plan.quant =
          c.plan_quant(shape, std::vector<size_t>(shape.layers * shape.kv_heads, shape.n_pos), ratio);
    if (build) out.view = CompressedView(shape, out.plan.quant);
    for (size_t l = 0; l < shape.layers; ++l) {
      out.plan.keep[l] = plan_one(l).keep;
      if (build) out.view.add_layer(kv, out.plan.keep[l], c, facts);
    }
    return out;
  }
  // Pass 1: plan (or score) every layer.
  std::vector<LayerPlan> layers;
  layers.reserve(shape.layers);
  for (size_t l = 0; l < shape.layers; ++l) layers.push_back(plan_one(l));
  if (c.selects_globally()) c.select_globally(layers, shape, ratio);
  std::vector<size_t> rows;
  for (size_t l = 0; l < shape.layers; ++l) {
    out.plan.keep[l] = std::move(layers[l].keep);
    if (out.plan.keep[l].size() != shape.kv_heads)
      throw Error(std::string(c.name()) + ": planned " + std::to_string(out.plan.keep[l].size()) +
                  " KV heads for layer " + std::to_string(l) + ", the KV has " +
                  std::to_string(shape.kv_heads));
    for (const auto& head : out.plan.keep[l]) rows.push_back(head.size());
  }
  layers.clear();
  if (c.quantizes()) out.plan.quant = c.plan_quant(shape, std::move(rows), ratio);
  if (!build) return out;
  // Pass 2: build, reading each layer again.
  out.view = CompressedView(shape, out.plan.quant);
  for (size_t l = 0; l < shape.layers; ++l) {
    read(l, kv);
    out.view.add_layer(kv, out.plan.keep[l], c, facts);
  }
  return out;
}

}  // namespace

LayerCompression compress_by_layer(const Compressor& c, const KvShape& shape,
                                   const LayerSource& read, const LayerStatsSource& stats,
                                   const ModelFacts& facts, double ratio) {
  return run(c, shape, read, stats, facts, ratio, /*build=*/true);
}

CompressionPlan plan_snapshot(const Compressor& c, const KvSnapshot& kv,
                              const LayerStatsSource& stats, const ModelFacts& facts,
                              double ratio) {
  const size_t elems = kv.layers * kv.kv_heads * kv.n_pos * kv.head_dim;
  if (kv.k.size() != elems || kv.v.size() != elems)
    throw Error("plan_snapshot: KvSnapshot k/v sizes do not match its shape");
  auto read = [&kv](size_t l, LayerKv& out) { kv.read_layer(l, out); };
  return run(c, kv.shape(), read, stats, facts, ratio, /*build=*/false).plan;
}

LayerStatsSource planted_stats(const std::vector<LayerStats>& stats) {
  return [&stats](const LayerKv& kv) {
    if (kv.layer >= stats.size())
      throw Error("planted_stats: no statistics for layer " + std::to_string(kv.layer));
    return stats[kv.layer];
  };
}

}  // namespace vc

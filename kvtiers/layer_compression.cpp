// The passes of layer-by-layer compression (see layer_compression.hpp).
#include "kvtiers/layer_compression.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "kernels/error.hpp"

namespace vc {

namespace {

// Tensor parallelism: `layers` holds this rank's heads' scores; selects over every
// head of the model (gathered from the other ranks) and keeps this rank's lists,
// so the plan is the one an unsharded model would make.
void select_across_shards(const Compressor& c, std::vector<LayerPlan>& layers,
                          const KvShape& shape, double ratio, HeadShards& shards) {
  KvShape global = shape;
  global.kv_heads = shards.global_kv_heads();
  std::vector<LayerPlan> all(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].scores.size() != shape.kv_heads * shape.n_pos)
      throw Error(std::string(c.name()) + ": layer " + std::to_string(l) +
                  " scores have the wrong size");
    all[l].scores = shards.gather(layers[l].scores, shape.n_pos);
  }
  c.select_globally(all, global, ratio);
  const size_t first = shards.first_kv_head();
  for (size_t l = 0; l < layers.size(); ++l) {
    layers[l].scores.clear();
    layers[l].keep.assign(all[l].keep.begin() + long(first),
                          all[l].keep.begin() + long(first + shape.kv_heads));
  }
}

// The quantizers' storage plan from every head's kept rows (rows[l * kv_heads + g]
// of this rank's heads), so that it does not depend on the degree.
QuantSpec plan_quant(const Compressor& c, const KvShape& shape, std::vector<size_t> rows,
                     double ratio, HeadShards* shards) {
  if (shards == nullptr) return c.plan_quant(shape, std::move(rows), ratio);
  const size_t L = shape.layers, G = shape.kv_heads, GG = shards->global_kv_heads();
  std::vector<float> local(G * L);  // [head][layer]; row counts are exact in float below 2^24
  for (size_t l = 0; l < L; ++l)
    for (size_t g = 0; g < G; ++g) local[g * L + l] = float(rows[l * G + g]);
  const std::vector<float> all = shards->gather(local, L);
  std::vector<size_t> global_rows(L * GG);
  for (size_t l = 0; l < L; ++l)
    for (size_t g = 0; g < GG; ++g) global_rows[l * GG + g] = size_t(all[g * L + l]);
  KvShape global = shape;
  global.kv_heads = GG;
  return c.plan_quant(global, std::move(global_rows), ratio);
}

// The passes; without `build` only the plan (no codec runs).
LayerCompression run(const Compressor& c, const KvShape& shape, const LayerSource& read,
                     const LayerStatsSource& stats, const ModelFacts& facts, double ratio,
                     size_t slice_heads, bool build) {
  if (!(ratio >= 1.0) || !std::isfinite(ratio))
    throw Error(std::string(c.name()) + ": compression ratio must be a finite number >= 1, got " +
                std::to_string(ratio));
  if (c.needs_stats() && !stats)
    throw Error("compressor '" + std::string(c.name()) +
                "' needs prefill statistics, and none were gathered");
  const size_t per = slice_heads == 0 ? std::max<size_t>(1, shape.kv_heads)
                                      : std::min(slice_heads, std::max<size_t>(1, shape.kv_heads));
  LayerKv kv;
  // Reads heads [g0, g0 + count) of layer l into kv, checking what the source gave.
  auto read_slice = [&](size_t l, size_t g0, size_t count) {
    read(l, g0, count, kv);
    if (kv.layer != l || kv.first_head != g0 || kv.kv_heads != count ||
        kv.head_dim != shape.head_dim || kv.n_pos != shape.n_pos)
      throw Error("compress_by_layer: the source gave layer " + std::to_string(kv.layer) +
                  ", KV heads " + std::to_string(kv.first_head) + "+" +
                  std::to_string(kv.kv_heads) + " shaped (" + std::to_string(kv.n_pos) + ", " +
                  std::to_string(kv.head_dim) + ") for layer " + std::to_string(l) +
                  ", KV heads " + std::to_string(g0) + "+" + std::to_string(count) +
                  " of a (n_pos, head_dim) = (" + std::to_string(shape.n_pos) + ", " +
                  std::to_string(shape.head_dim) + ") request");
  };
  // Tensor parallelism: this rank's heads are a slice of the model's, planned with
  // their absolute indices (the statistics and facts are the whole model's).
  const size_t head0 = facts.shards != nullptr ? facts.shards->first_kv_head() : 0;
  auto plan_slice = [&]() {
    kv.first_head += head0;
    std::optional<LayerStats> st;
    if (c.needs_stats()) st = stats(kv);
    LayerPlan p = c.plan_layer(LayerInput{kv, st ? &*st : nullptr, facts, shape.layers, ratio});
    kv.first_head -= head0;
    if (!c.selects_globally() && p.keep.size() != kv.kv_heads)
      throw Error(std::string(c.name()) + ": planned " + std::to_string(p.keep.size()) +
                  " KV heads for layer " + std::to_string(kv.layer) + ", heads " +
                  std::to_string(kv.first_head) + "+" + std::to_string(kv.kv_heads) +
                  " were given");
    return p;
  };
  // Calls f(g0, count) for the slices [g0, g0 + count) of a layer, in head order.
  auto for_slices = [&](auto&& f) {
    for (size_t g0 = 0; g0 < shape.kv_heads; g0 += per) f(g0, std::min(per, shape.kv_heads - g0));
  };
  LayerCompression out;
  out.plan.keep.resize(shape.layers);
  const bool one_pass = !c.selects_globally() && (!c.quantizes() || c.keeps_every_position());
  if (one_pass) {
    // Storage known before any layer (bf16, or a quantizer keeping every position):
    // each slice is planned and built from one read.
    if (c.quantizes())
      out.plan.quant = plan_quant(c, shape, std::vector<size_t>(shape.layers * shape.kv_heads, shape.n_pos),
                                  ratio, facts.shards);
    if (build) out.view = CompressedView(shape, out.plan.quant);
    for (size_t l = 0; l < shape.layers; ++l)
      for_slices([&](size_t g0, size_t count) {
        read_slice(l, g0, count);
        LayerPlan p = plan_slice();
        if (build) out.view.add_heads(kv, p.keep, c, facts);
        for (auto& head : p.keep) out.plan.keep[l].push_back(std::move(head));
      });
    return out;
  }
  // Pass 1: plan (or score) every layer, slice by slice.
  std::vector<LayerPlan> layers(shape.layers);
  for (size_t l = 0; l < shape.layers; ++l)
    for_slices([&](size_t g0, size_t count) {
      read_slice(l, g0, count);
      layers[l].append(plan_slice());
    });
  if (c.selects_globally()) {
    if (facts.shards != nullptr) select_across_shards(c, layers, shape, ratio, *facts.shards);
    else c.select_globally(layers, shape, ratio);
  }
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
  if (c.quantizes()) out.plan.quant = plan_quant(c, shape, std::move(rows), ratio, facts.shards);
  if (!build) return out;
  // Pass 2: build, reading each slice again.
  out.view = CompressedView(shape, out.plan.quant);
  std::vector<std::vector<int32_t>> keep;
  for (size_t l = 0; l < shape.layers; ++l)
    for_slices([&](size_t g0, size_t count) {
      read_slice(l, g0, count);
      keep.assign(out.plan.keep[l].begin() + long(g0), out.plan.keep[l].begin() + long(g0 + count));
      out.view.add_heads(kv, keep, c, facts);
    });
  return out;
}

}  // namespace

LayerCompression compress_by_layer(const Compressor& c, const KvShape& shape,
                                   const LayerSource& read, const LayerStatsSource& stats,
                                   const ModelFacts& facts, double ratio, size_t slice_heads) {
  return run(c, shape, read, stats, facts, ratio, slice_heads, /*build=*/true);
}

CompressionPlan plan_snapshot(const Compressor& c, const KvSnapshot& kv,
                              const LayerStatsSource& stats, const ModelFacts& facts,
                              double ratio, size_t slice_heads) {
  const size_t elems = kv.layers * kv.kv_heads * kv.n_pos * kv.head_dim;
  if (kv.k.size() != elems || kv.v.size() != elems)
    throw Error("plan_snapshot: KvSnapshot k/v sizes do not match its shape");
  auto read = [&kv](size_t l, size_t g0, size_t count, LayerKv& out) {
    kv.read_heads(l, g0, count, out);
  };
  return run(c, kv.shape(), read, stats, facts, ratio, slice_heads, /*build=*/false).plan;
}

size_t slice_heads_for(size_t kv_heads, size_t dtype_bytes) {
  return std::max<size_t>(1, kv_heads * std::min<size_t>(dtype_bytes, 4) / 4);
}

LayerStatsSource planted_stats(const std::vector<LayerStats>& stats) {
  return [&stats](const LayerKv& kv) {
    if (kv.layer >= stats.size())
      throw Error("planted_stats: no statistics for layer " + std::to_string(kv.layer));
    return stats[kv.layer];
  };
}

}  // namespace vc

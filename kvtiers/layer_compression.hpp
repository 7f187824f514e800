// Compressing a request slice by slice: the passes over its KV that a method's plan
// needs, holding the fp32 KV of a few KV heads of one layer (and, for model-wide
// methods, per-layer scores) at a time. Per-layer methods plan and build each slice
// in one pass; methods that select model-wide, and drop+quantize compositions
// (whose storage depends on every layer's kept counts), score in a first pass and
// build in a second one that reads each slice again. Methods plan each KV head from
// its own KV and statistics, so the plan is the same for any slicing.
#pragma once
#include <cstddef>
#include <functional>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"

namespace vc {

/// Fills `out` with KV heads [first_head, first_head + heads) of layer `layer` of
/// the request (positions [0, shape.n_pos)).
using LayerSource =
    std::function<void(size_t layer, size_t first_head, size_t heads, LayerKv& out)>;
/// The statistics of one slice of a layer (from its KV), for a method that needs them.
using LayerStatsSource = std::function<LayerStats(const LayerKv& kv)>;

/// A request's plan and the view built from it.
struct LayerCompression {
  CompressionPlan plan;
  CompressedView view;
};

/// Plans with `c` at `ratio` and builds the view of a request of `shape`, reading
/// `slice_heads` KV heads of a layer at a time (0 or >= kv_heads: whole layers).
/// `stats` may be empty only when the method needs no statistics (else vc::Error
/// naming the method).
[[nodiscard]] LayerCompression compress_by_layer(const Compressor& c, const KvShape& shape,
                                                 const LayerSource& read,
                                                 const LayerStatsSource& stats,
                                                 const ModelFacts& facts, double ratio,
                                                 size_t slice_heads = 0);

/// The plan compress_by_layer makes for a whole-request snapshot (tests, tools),
/// without building the view.
[[nodiscard]] CompressionPlan plan_snapshot(const Compressor& c, const KvSnapshot& kv,
                                            const LayerStatsSource& stats,
                                            const ModelFacts& facts, double ratio,
                                            size_t slice_heads = 0);

/// KV heads per slice that keep compression's fp32 working set at about one layer's
/// KV as stored (`dtype_bytes` per element): half the heads for bf16, all for f32.
[[nodiscard]] size_t slice_heads_for(size_t kv_heads, size_t dtype_bytes);

/// A LayerStatsSource giving stats[l] for layer l (statistics planted by tests).
[[nodiscard]] LayerStatsSource planted_stats(const std::vector<LayerStats>& stats);

}  // namespace vc

// Compressing a request layer by layer: the passes over its KV that a method's plan
// needs, holding one layer's KV (and, for model-wide methods, per-layer scores) at
// a time. Per-layer methods plan and build each layer in one pass; methods that
// select model-wide, and drop+quantize compositions (whose storage depends on every
// layer's kept counts), score in a first pass and build in a second one that reads
// each layer again.
#pragma once
#include <cstddef>
#include <functional>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"

namespace vc {

/// Fills `out` with layer `layer` of the request (positions [0, shape.n_pos)).
using LayerSource = std::function<void(size_t layer, LayerKv& out)>;
/// The statistics of one layer (from its KV), for a method that needs them.
using LayerStatsSource = std::function<LayerStats(const LayerKv& kv)>;

/// A request's plan and the view built from it.
struct LayerCompression {
  CompressionPlan plan;
  CompressedView view;
};

/// Plans with `c` at `ratio` and builds the view of a request of `shape`, layer by
/// layer. `stats` may be empty only when the method needs no statistics (else
/// vc::Error naming the method).
[[nodiscard]] LayerCompression compress_by_layer(const Compressor& c, const KvShape& shape,
                                                 const LayerSource& read,
                                                 const LayerStatsSource& stats,
                                                 const ModelFacts& facts, double ratio);

/// The plan compress_by_layer makes for a whole-request snapshot (tests, tools),
/// without building the view.
[[nodiscard]] CompressionPlan plan_snapshot(const Compressor& c, const KvSnapshot& kv,
                                            const LayerStatsSource& stats,
                                            const ModelFacts& facts, double ratio);

/// A LayerStatsSource giving stats[l] for layer l (statistics planted by tests).
[[nodiscard]] LayerStatsSource planted_stats(const std::vector<LayerStats>& stats);

}  // namespace vc

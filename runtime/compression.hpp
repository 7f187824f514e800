// Building and rebuilding a request's compressed view from its full KV: the glue
// between the forward pass (runtime) and the compressors and tiers (kvtiers).
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/forward.hpp"
#include "runtime/model.hpp"

namespace vc {

/// The first n_pos positions of `seq` as dense fp32 (K after RoPE, as cached).
[[nodiscard]] KvSnapshot snapshot_kv(const PagedKvCache& cache, const KvSequence& seq,
                                     size_t n_pos);

/// What compressors may know of the model, for a snapshot of positions [0, n_pos).
[[nodiscard]] ModelFacts model_facts(const Model& model, size_t n_pos);

/// Plans with `compressor` at `ratio` and applies the plan. `stats` may be null
/// only for methods that do not need them (else vc::Error).
[[nodiscard]] CompressedView compress(const Compressor& compressor, const KvSnapshot& kv,
                                      const PrefillStats* stats, const ModelFacts& facts,
                                      double ratio);


/// The first n positions of request `id` in the full tier as dense fp32.
[[nodiscard]] KvSnapshot snapshot_full_tier(FullTier& tier, uint64_t id, size_t n);

/// When a request's uncompressed tail has grown to `fold_every` positions, its view
/// is rebuilt over [0, n) from the full tier through its compressor, so the view
/// keeps its budget (full bytes / ratio) as the request grows. `stats` (from the
/// latest verify pass) is needed by methods that need statistics; returns nullopt
/// when no fold is due or possible.
[[nodiscard]] std::optional<CompressedView> refold(const Compressor& compressor, FullTier& tier,
                                                   uint64_t id, size_t n,
                                                   const PrefillStats* stats, const Model& model,
                                                   double ratio);

/// What prefill_request produces.
struct PrefilledRequest {
  std::vector<float> logits;           // of the last prompt position
  std::optional<CompressedView> view;  // when a compressor was given
  double prefill_seconds = 0, compress_seconds = 0;
};

/// Prefills `prompt` into `seq` (gathering the statistics `compressor` needs) and,
/// when `compressor` is non-null, builds the prompt's compressed view at `ratio`.
[[nodiscard]] PrefilledRequest prefill_request(const Model& model, std::span<const int32_t> prompt,
                                               KvSequence& seq, PagedKvCache& cache,
                                               Workspace& ws, const Compressor* compressor,
                                               double ratio, size_t stats_window,
                                               size_t prefill_chunk);

}  // namespace vc

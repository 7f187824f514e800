// Prefill straight into a full tier: the prompt's KV never occupies fast memory.
// Chunks of prompt positions run as passes over the tier's KV, staged a chunk of
// positions at a time by a LayerStreamer (exactly as a verify pass reads it), and
// each chunk's KV is appended to the tier. Every op is batch invariant and the
// attention merges the staged blocks in position order, so the KV and logits are
// bit-identical to prefilling into a PagedKvCache.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "runtime/compression.hpp"
#include "runtime/forward.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/model.hpp"

namespace vc {

/// Appends the KV of `prompt` to request `id` of `tier` (which must hold exactly
/// positions [0, already) of the same sequence; usually 0) in chunks of `chunk`
/// rows, reading earlier positions through `stream` (a streamer over `tier`).
/// `scratch` is any cache of the model's shape (forward() takes one; it is not
/// written). ws.stats, when set, observes every row (layers staged whole then).
/// Returns the logits of the last position ([vocab]); `stream`'s buffers are freed
/// once the prompt is in (LayerStreamer::free_buffers).
[[nodiscard]] std::vector<float> prefill_to_tier(const Model& model, std::span<const int32_t> prompt,
                                                 uint64_t id, FullTier& tier, LayerStreamer& stream,
                                                 PagedKvCache& scratch, Workspace& ws,
                                                 size_t chunk = 256);

/// Whether the statistics `c` needs during prefill read every key of a layer (then
/// the prefill stages whole layers instead of chunks).
[[nodiscard]] bool prefill_stats_need_whole_layers(const Compressor& c);
/// Whether the statistics a verify pass gathers for re-compressing with `c` do.
[[nodiscard]] bool verify_stats_need_whole_layers(const Compressor& c);

/// Prefill of a lossy or vericache request: the prompt goes to request `id` of
/// `tier` (created by the caller, empty) through prefill_to_tier, gathering the
/// statistics `compressor` needs; the view is built from the tier; `seq` (empty)
/// starts after the prompt (cache.start_at), so fast memory holds the view and,
/// later, the tail. A lossy caller releases the tier entry afterwards. `cached`:
/// positions [0, cached) of the prompt are already in the tier (a prefix fetched
/// from the remote store, cached < prompt.size()); only the rest is computed, and
/// the statistics observe only those rows.
/// prefill_compressed() without a drafter's sequence: the exact KV of [cached, n)
/// into the tier, gathering the statistics `compressor` needs, and the view of the
/// whole prompt built from the tier. Compressed first rebuilds its fetched view so
/// once the full prefix is in. `scratch`: as prefill_to_tier's.
/// `on_logits`, when set, gets the last prompt position's exact logits as soon as
/// the prefill has them, before the view is built: a caller can emit the first
/// token then, since it never depends on the view.
using PromptLogitsHook = std::function<void(std::span<const float> logits)>;
[[nodiscard]] PrefilledRequest prefill_and_compress(const Model& model,
                                                    std::span<const int32_t> prompt,
                                                    PagedKvCache& scratch, Workspace& ws,
                                                    const Compressor& compressor, double ratio,
                                                    size_t stats_window, size_t prefill_chunk,
                                                    FullTier& tier, LayerStreamer& stream,
                                                    uint64_t id, size_t cached,
                                                    const PromptLogitsHook& on_logits = {});
[[nodiscard]] PrefilledRequest prefill_compressed(const Model& model,
                                                  std::span<const int32_t> prompt,
                                                  KvSequence& seq, PagedKvCache& cache,
                                                  Workspace& ws, const Compressor& compressor,
                                                  double ratio, size_t stats_window,
                                                  size_t prefill_chunk, FullTier& tier,
                                                  LayerStreamer& stream, uint64_t id,
                                                  size_t cached = 0,
                                                  const PromptLogitsHook& on_logits = {});

}  // namespace vc

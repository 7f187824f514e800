// Building and rebuilding a request's compressed view from its full KV: the glue
// between the forward pass (runtime) and the compressors and tiers (kvtiers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
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

/// What compressors may know of the model, for a request of positions [0, n_pos).
[[nodiscard]] ModelFacts model_facts(const Model& model, size_t n_pos);

/// Fills `out` with the K and V of KV heads [first_head, first_head + heads) of
/// layer `layer`, positions [0, n), as dense fp32 (K after RoPE, as cached;
/// LayerKv layout [heads][n][head_dim]).
using LayerKvReader = std::function<void(size_t layer, size_t n, size_t first_head, size_t heads,
                                         LayerKv& out)>;

/// Reads request `id`'s layers from the full tier (FullTier::read_layer, converted).
[[nodiscard]] LayerKvReader tier_layer_reader(FullTier& tier, uint64_t id);
/// Writes request `id`'s full-tier KV of positions [from, to) over `seq`'s rows of
/// every layer in `cache` (which holds them): the compressed-first flow's tail takes
/// the suffix's exact KV so.
void copy_tier_rows(FullTier& tier, uint64_t id, size_t from, size_t to, PagedKvCache& cache,
                    KvSequence& seq);
/// Reads `seq`'s layers from the paged cache (which must outlive the reader).
[[nodiscard]] LayerKvReader cache_layer_reader(const PagedKvCache& cache, const KvSequence& seq);

/// KV heads compressed per slice for KV stored as `c` says: the fp32 working set of
/// a slice is then about one layer's KV as stored (kvtiers slice_heads_for).
[[nodiscard]] size_t compression_slice_heads(const KvCacheConfig& c);

/// Plans and builds the view of positions [0, n) slice by slice (`slice_heads` KV
/// heads of one layer at a time; 0: whole layers), so compression holds about one
/// layer's KV at a time (model-wide methods read every slice twice). `stats` may
/// be null only for methods that need none (else vc::Error); `facts` must come
/// from model_facts(model, n).
[[nodiscard]] CompressedView compress_layers(const Compressor& c, size_t n,
                                             const LayerKvReader& read, const PrefillStats* stats,
                                             const ModelFacts& facts, double ratio,
                                             size_t slice_heads);

/// When a request's uncompressed tail has grown to `fold_every` positions, its view
/// is rebuilt over [0, n) from the full tier through its compressor, so the view
/// keeps its budget (full bytes / ratio) as the request grows. `stats` (from the
/// latest verify pass) is needed by methods that need statistics; returns nullopt
/// when no fold is due or possible.
/// `read`, calling between_prefill_chunks(ws) before each new layer when ws has a
/// chunk hook (a sliced prefill or fold yields there), else `read` itself.
[[nodiscard]] LayerKvReader yielding_reader(LayerKvReader read, Workspace& ws);

[[nodiscard]] std::optional<CompressedView> refold(const Compressor& compressor, FullTier& tier,
                                                   uint64_t id, size_t n,
                                                   const PrefillStats* stats, const Model& model,
                                                   double ratio, Workspace* ws = nullptr);

/// What prefill_request produces.
struct PrefilledRequest {
  std::vector<float> logits;           // of the last prompt position
  std::optional<CompressedView> view;  // when a compressor was given
  double prefill_seconds = 0, compress_seconds = 0;
  /// When the compressor scores hidden states (KVzap): the prompt's scores,
  /// [layers][outputs][prompt positions] (HiddenScoreLog::append takes them).
  std::vector<float> hidden_scores;
};

/// Prefills `prompt` into `seq` (gathering the statistics `compressor` needs) and,
/// when `compressor` is non-null, builds the prompt's compressed view at `ratio`.
[[nodiscard]] PrefilledRequest prefill_request(const Model& model, std::span<const int32_t> prompt,
                                               KvSequence& seq, PagedKvCache& cache,
                                               Workspace& ws, const Compressor* compressor,
                                               double ratio, size_t stats_window,
                                               size_t prefill_chunk);

}  // namespace vc

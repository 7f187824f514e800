// Building a request's compressed view from its full KV: the glue between the
// forward pass (runtime) and the compressors and tiers (kvtiers).
#pragma once
#include <cstddef>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/paged_kv_cache.hpp"
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

}  // namespace vc

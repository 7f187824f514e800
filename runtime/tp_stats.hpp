// Prefill (and verify) statistics under tensor parallelism: a rank gathers its own
// query heads; compression needs every query head of the KV heads it plans.
#pragma once
#include "kvtiers/compressor.hpp"
#include "runtime/model.hpp"

namespace vc {

/// For a shard: the statistics of the whole model from every rank's `local` ones
/// (a collective: every rank calls it at the same point). Window queries and query
/// moments are joined in head order; accumulated attention of a KV head is its
/// ranks' sums added in rank order (a KV head replicated on several ranks receives
/// the attention of each rank's query heads). For an unsharded model: `local`.
/// Hidden-state scores (KVzap) are already the whole model's on every rank (each
/// rank scores the replicated hidden states with the whole surrogate): kept as they are.
[[nodiscard]] PrefillStats gather_stats(PrefillStats local, const Model& model);

}  // namespace vc

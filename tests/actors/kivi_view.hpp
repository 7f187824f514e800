// A real compressed view for the actors' tests: KIVI codes of one KV head over
// `covered` positions (its rows have bytes, so it can be sliced, joined and sized).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/layer_compression.hpp"

namespace vc::test {

inline std::shared_ptr<const CompressedView> kivi_view(size_t covered) {
  KvSnapshot kv{1, 1, 8, covered, {}, {}};
  kv.k.resize(covered * 8);
  for (size_t i = 0; i < kv.k.size(); ++i) kv.k[i] = float(i % 13) * 0.25f - 1.0f;
  kv.v = kv.k;
  ModelFacts facts;
  facts.heads = 1;
  for (size_t p = 0; p < covered; ++p) facts.positions.push_back(int32_t(p));
  auto c = make_compressor("kivi", {{"group_size", 16}});
  return std::make_shared<const CompressedView>(
      CompressedView::build(kv, plan_snapshot(*c, kv, {}, facts, 4.0), *c, facts));
}

}  // namespace vc::test

// KVzip's per-position score from a layer's statistics (kvzip.cpp documents it), shared
// by the kvzip method and by KVzap's calibration, whose targets are these scores.
#pragma once
#include <cstddef>
#include <vector>

#include "kvtiers/compressor.hpp"

namespace vc {

/// score(p) = max(max_w window_row(g, w)[p], accumulated(g)[p] / (n_pos - p)) for KV
/// head g of `s` (which must hold window attention and accumulated attention);
/// out has s.n_pos entries.
void kvzip_scores(const LayerStats& s, size_t g, std::vector<float>& out);

}  // namespace vc

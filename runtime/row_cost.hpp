// The cost of one forward pass as a function of its row count: what a verify pass of
// L+1 rows costs against a single decode row, at a given context. The adaptive
// draft-length policy can weigh a longer draft with this curve.
#pragma once
#include <cstddef>
#include <vector>

#include "runtime/model.hpp"

namespace vc {

/// For each n in `rows`, the median wall time in seconds (over `repeats` runs after
/// one warm-up) of one forward pass of n rows of one sequence at positions
/// context .. context+n-1, every row wanting logits (as a verify pass of n-1 drafts
/// does), attending over `context` positions of KV in a bf16 PagedKvCache. The
/// context's KV is synthetic (hashed values written straight into the cache; the
/// cost does not depend on them), so no prefill is run. `threads` <= 0: the default
/// thread count. Requires context + max(rows) <= max_position_embeddings, every
/// n >= 1, repeats >= 1 (else vc::Error).
[[nodiscard]] std::vector<double> measure_row_costs(const Model& model, size_t context,
                                                    const std::vector<size_t>& rows,
                                                    int repeats, int threads = 0);

}  // namespace vc

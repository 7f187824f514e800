// The drafter's attention of one query row over a compressed view: the view's kept
// rows of a layer (read in place when stored plain; attended straight from their
// codes when quantized without a transform, or with RotateKV's Hadamard rotation,
// in its basis; else decoded a block of rows at a time) followed by the request's
// paged tail of newer positions.
#pragma once
#include <cstddef>

#include "kernels/cpu/attention.hpp"
#include "kvtiers/compressed_tier.hpp"

namespace vc {

/// out[h] = attention of q[h] over layer l of `view` (KV head h / (n_heads /
/// kv_heads)), then the tail's positions [view.covered(), n_ctx).
/// cpu::attention_row_mixed's arithmetic (for Hadamard-rotated heads in their basis:
/// not the bits of rotating each row back first): with a `pool`, KV heads split
/// across its threads when the context is long enough, with the same bits.
void attend_view_row(const CompressedView& view, size_t l, const float* q, size_t n_heads,
                     const cpu::PagedKv& tail, size_t n_ctx, float scale, float* out,
                     cpu::ThreadPool* pool = nullptr);

}  // namespace vc

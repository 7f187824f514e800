// Upper bounds of a request's fast memory (see the header).
#include "runtime/fast_memory_need.hpp"

#include <algorithm>
#include <cmath>

#include "kvtiers/full_tier.hpp"
#include "runtime/streamed_prefill.hpp"

namespace vc {

namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Blocks of positions [first, last): whole blocks from first's block on.
size_t blocks_between(size_t first, size_t last, size_t bt) {
  return last <= first ? 0 : (last + bt - 1) / bt - first / bt;
}

// K and V staging of a pass whose layers are staged whole over n positions: two
// buffers, each K and V of n positions rounded as the tier reads them.
size_t whole_layer_staging(const KvCacheConfig& kv, size_t n) {
  const size_t bytes = round_up(n, kv.block_tokens) * kv.kv_heads * kv.head_dim * dtype_size(kv.dtype);
  return 2 * 2 * round_up(bytes, kTierAlign);
}

}  // namespace

std::string FastNeed::describe() const {
  std::string s = format_bytes(total()) + " (";
  if (view > 0) s += "view " + format_bytes(view) + " + ";
  s += "blocks " + format_bytes(blocks);
  if (staging > 0) s += " + whole-layer staging " + format_bytes(staging);
  return s + ")";
}

FastNeed fast_memory_need(const DraftSpec& spec, const KvCacheConfig& kv, size_t max_draft) {
  const size_t bt = kv.block_tokens;
  const size_t per_token = 2 * kv.num_layers * kv.kv_heads * kv.head_dim * dtype_size(kv.dtype);
  const size_t block = bt * per_token;
  const size_t n = spec.prompt.size(), gen = spec.max_new_tokens;
  FastNeed need;
  if (spec.mode == DecodeMode::full) {
    need.blocks = blocks_between(0, n + gen + 1, bt) * block;
    return need;
  }
  const std::unique_ptr<Compressor> c = make_compressor(spec.compressor, spec.compressor_params);
  // By threshold, the view may keep every position: bound it as uncompressed.
  const double ratio = c->selection().by_threshold ? 1.0 : std::max(1.0, spec.ratio);
  auto view_bound = [&](size_t positions) {
    const double full = double(positions) * double(per_token);
    const double rows = double(positions) * double(kv.num_layers * kv.kv_heads);
    double stored = 1.1 * full / ratio;
    // A method that can say what it stores may need more than that (quantizers with
    // their bits set, or at a ratio no setting reaches); one that keeps every
    // position says it exactly (a view rebuilt over fewer positions stores less).
    if (const auto own = c->stored_bytes_bound({kv.num_layers, kv.kv_heads, kv.head_dim, positions}, ratio))
      stored = c->keeps_every_position() ? double(*own) : std::max(stored, double(*own));
    // Each kept row's index (int32), and its absolute position where keys are
    // stored before RoPE; the RoPE frequencies fit in the 4 KiB. Heads that keep
    // the same rows share one list (kvtiers/position_list.hpp): a method that keeps
    // every position holds one list for the whole view.
    const double lists = c->keeps_every_position() ? double(positions) : rows;
    const double position_bytes = c->stores_keys_before_rope() ? 8.0 : 4.0;
    return size_t(std::ceil(stored + position_bytes * lists)) + 4096;
  };
  const size_t L = max_draft + 1;
  // The tail's blocks without folding: [n, n + gen + L). Folds only release the
  // tail's front, so this bounds a folding request's tail too.
  const size_t unfolded_tail = blocks_between(n, n + gen + L, bt);
  if (spec.mode == DecodeMode::lossy) {
    need.view = view_bound(n);
    need.blocks = blocks_between(n, n + gen + 1, bt) * block;
  } else if (spec.fold_every > 0) {
    need.view = view_bound(n + gen);
    need.blocks = std::min(blocks_between(0, spec.fold_every + 2 * L, bt) + 1, unfolded_tail) * block;
  } else {
    need.view = view_bound(n);
    need.blocks = unfolded_tail * block;
  }
  {
    if (prefill_stats_need_whole_layers(*c)) need.staging = whole_layer_staging(kv, n);
    if (spec.mode == DecodeMode::vericache && spec.fold_every > 0 && verify_stats_need_whole_layers(*c))
      need.staging = std::max(need.staging, whole_layer_staging(kv, n + gen + L));
  }
  return need;
}

size_t tail_blocks_bytes(const KvCacheConfig& kv, size_t positions) {
  const size_t bt = kv.block_tokens;
  const size_t per_token = 2 * kv.num_layers * kv.kv_heads * kv.head_dim * dtype_size(kv.dtype);
  return ((positions + bt - 1) / bt + 1) * bt * per_token;
}

size_t engine_fast_overhead(const KvCacheConfig& kv, size_t stage_positions,
                            size_t verify_lanes) {
  const size_t positions = stage_positions == 0 ? kv.block_tokens : stage_positions;
  // The verifier's streamers and the prefill's.
  return (std::max<size_t>(1, verify_lanes) + 1) * whole_layer_staging(kv, positions);
}

}  // namespace vc

#include "runtime/view_rows_plan.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"

namespace vc {
namespace {

// True when a backend can dequantize `side` (n rows of d values) as
// PackedSide::decode does; false for forms it does not take. Throws when the side's
// arrays do not hold what its rows need (the backend would read past them).
bool side_readable(const PackedSide& side, size_t n, size_t d, const float* rope_inv_freq) {
  if (!side.raw.empty()) return false;  // an undescribed codec's fp32 values
  if (side.transform == PackedTransform::hadamard && (d & (d - 1)) != 0) return false;
  if (side.transform == PackedTransform::rope && rope_inv_freq == nullptr) return false;
  const size_t q = std::min(side.quant_rows, n);
  bool ok = side.full.size() == (n - q) * d && side.outlier_value.size() == side.outlier_index.size();
  if (q > 0) {
    const size_t br = std::max<size_t>(side.block.rows, 1), bc = std::max<size_t>(side.block.cols, 1);
    const size_t blocks = (q + br - 1) / br * ((d + bc - 1) / bc);
    ok = ok && side.bits >= 1 && side.bits <= 16 && side.codes.size() * 8 >= q * d * size_t(side.bits) &&
         side.zero.size() >= blocks && side.scale.size() >= blocks;
  }
  bool ascending = true;  // the device finds a row's outliers by binary search
  for (size_t i = 0; i < side.outlier_index.size(); ++i) {
    ok = ok && side.outlier_index[i] < n * d;
    ascending = ascending && (i == 0 || side.outlier_index[i - 1] < side.outlier_index[i]);
  }
  if (!ok) throw Error("plan_view_rows: a compressed view's packed side does not hold its " +
                       std::to_string(n) + " rows");
  return ascending;
}

}  // namespace

std::optional<ViewRowsPlan> plan_view_rows(const PagedKvCache& cache, size_t layer,
                                           std::span<const CompressedView* const> views,
                                           std::span<const KvSequence* const> seqs,
                                           std::span<const int32_t> n_ctx) {
  const size_t M = views.size();
  if (seqs.size() != M || n_ctx.size() != M)
    throw Error("plan_view_rows: " + std::to_string(M) + " views, " + std::to_string(seqs.size()) +
                " sequences and " + std::to_string(n_ctx.size()) + " context lengths");
  const KvCacheConfig& cfg = cache.config();
  const size_t nkv = cfg.kv_heads, bt = cfg.block_tokens;
  ViewRowsPlan plan;
  plan.layer = layer;
  plan.prefix_of.resize(M * nkv);
  plan.tail_begin.resize(M);
  std::map<std::pair<const CompressedView*, size_t>, int32_t> seen;  // (view, head) -> prefix
  for (size_t m = 0; m < M; ++m) {
    const CompressedView& view = *views[m];
    if (view.kv_heads() != nkv || view.head_dim() != cfg.head_dim || layer >= view.layers())
      throw Error("plan_view_rows: a view of another shape than the cache's");
    for (size_t g = 0; g < nkv; ++g) {
      auto [it, fresh] = seen.emplace(std::pair{&view, g}, int32_t(plan.prefixes.size()));
      if (fresh) {
        ViewRowsPlan::Prefix p;
        p.view = &view, p.head = g;
        p.rows = view.count(layer, g);
        if (p.rows > 0) {
          const auto rows = view.rows_in_place(layer, g);
          if (rows && rows->dtype == cfg.dtype) {
            p.k = rows->k, p.v = rows->v;
          } else {
            const CompressedView::Stored st = view.stored(layer, g);
            for (const PackedSide* side : {&st.head->k, &st.head->v})
              if (!side_readable(*side, p.rows, cfg.head_dim, st.rope_inv_freq)) return std::nullopt;
            p.k_side = &st.head->k, p.v_side = &st.head->v;
            p.positions = st.positions, p.rope_inv_freq = st.rope_inv_freq;
            if (st.head->k.transform == PackedTransform::rope || st.head->v.transform == PackedTransform::rope) {
              if (plan.rope_inv_freq == nullptr) plan.rope_inv_freq = st.rope_inv_freq;
              if (!std::equal(st.rope_inv_freq, st.rope_inv_freq + cfg.head_dim / 2, plan.rope_inv_freq))
                return std::nullopt;  // one table per pass
              plan.max_rope_position = std::max(plan.max_rope_position,
                                                *std::max_element(p.positions, p.positions + p.rows));
            }
          }
        }
        plan.prefixes.push_back(p);
      }
      plan.prefix_of[m * nkv + g] = it->second;
    }
    plan.tail_begin[m] = int32_t(view.covered());
    if (size_t(n_ctx[m]) < view.covered())
      throw Error("plan_view_rows: a row attends to fewer positions than its view covers");
    plan.table_stride = std::max(plan.table_stride, (size_t(n_ctx[m]) + bt - 1) / bt);
  }
  plan.tables.assign(M * plan.table_stride, 0);
  for (size_t m = 0; m < M; ++m) {
    const size_t first = size_t(plan.tail_begin[m]) / bt, end = (size_t(n_ctx[m]) + bt - 1) / bt;
    if (end > seqs[m]->blocks.size())
      throw Error("plan_view_rows: row " + std::to_string(m) + " reads " + std::to_string(n_ctx[m]) +
                  " positions its sequence does not hold");
    for (size_t j = first; j < end; ++j) {
      const int32_t b = seqs[m]->blocks[j];
      if (b < 0)
        throw Error("plan_view_rows: row " + std::to_string(m) + " reads KV block " +
                    std::to_string(j) + ", which has been released");
      plan.tables[m * plan.table_stride + j] = b;
      plan.tail_blocks.push_back(b);
    }
    const size_t tail = size_t(n_ctx[m]) - size_t(plan.tail_begin[m]);
    for (size_t g = 0; g < nkv; ++g)
      plan.max_entries = std::max(plan.max_entries, plan.prefixes[size_t(plan.prefix_of[m * nkv + g])].rows + tail);
  }
  return plan;
}

}  // namespace vc

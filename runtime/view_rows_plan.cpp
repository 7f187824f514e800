#include "runtime/view_rows_plan.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"

namespace vc {

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
        p.rows = view.count(layer, g);
        if (p.rows > 0) {
          const auto rows = view.rows_in_place(layer, g);
          if (!rows || rows->dtype != cfg.dtype) return std::nullopt;
          p.k = rows->k, p.v = rows->v;
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

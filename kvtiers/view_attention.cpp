#include "kvtiers/view_attention.hpp"

#include <vector>

#include "kernels/cpu/attention_mixed.hpp"

namespace vc {

namespace {

struct PackedRows {
  const CompressedView* view = nullptr;
  size_t l = 0, g = 0;
  CompressedView::QuantSides quant;  // sides attended straight from their codes
};

void decode_packed_rows(const void* ctx, size_t r0, size_t r1, float* k, float* v) {
  const auto* p = static_cast<const PackedRows*>(ctx);
  p->view->decode_rows(p->l, p->g, r0, r1, k, v);
}

void decode_rotated_rows(const void* ctx, size_t r0, size_t r1, float* k, float* v) {
  const auto* p = static_cast<const PackedRows*>(ctx);
  p->view->decode_rows_rotated(p->l, p->g, r0, r1, k, v);
}

}  // namespace

void attend_view_row(const CompressedView& view, size_t l, const float* q, size_t n_heads,
                     const cpu::PagedKv& tail, size_t n_ctx, float scale, float* out,
                     cpu::ThreadPool* pool) {
  const size_t nkv = view.kv_heads();
  thread_local std::vector<cpu::DenseKvHead> prefix;  // reused across steps
  thread_local std::vector<PackedRows> packed;
  prefix.resize(nkv);
  packed.resize(nkv);
  for (size_t g = 0; g < nkv; ++g) {
    const size_t n = view.count(l, g);
    if (const auto rows = view.rows_in_place(l, g)) {
      prefix[g] = {rows->k, rows->v, n, rows->dtype};
      continue;
    }
    // RotateKV's rows are attended in their rotated basis: the queries, the tail
    // and the output are rotated instead of every kept row.
    const bool rotated = view.hadamard_basis(l, g);
    packed[g] = {&view, l, g, rotated ? view.quant_sides_rotated(l, g) : view.quant_sides(l, g)};
    const auto& qs = packed[g].quant;
    prefix[g] = {nullptr, nullptr, n, DType::f32,
                 rotated ? &decode_rotated_rows : &decode_packed_rows, &packed[g],
                 qs.k ? &*qs.k : nullptr, qs.v ? &*qs.v : nullptr, rotated};
  }
  cpu::attention_row_mixed(q, n_heads, prefix.data(), tail, view.covered(), n_ctx, scale, out,
                           pool);
}

}  // namespace vc

// Paged GQA attention of one query row for the AVX2 path (8 lanes over head_dim, FMA):
// the generic kernel of attention_kernel.hpp instantiated with Avx2Simd.
#include "kernels/cpu/simd_avx2.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/attention_kernel.hpp"
#include "kernels/cpu/attention_accumulate_kernel.hpp"

namespace vc::cpu {

void attention_avx2(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                    float scale, float* out, float* scratch, size_t g_begin, size_t g_end) {
  attention_path<Avx2Simd>(q, n_heads, kv, n_ctx, scale, out, scratch, g_begin, g_end);
}

void attention_blocks_avx2(size_t n_heads, const PagedKv& kv, size_t n_ctx, size_t j_begin,
                       size_t j_end, float* state, float* sc, size_t g_begin, size_t g_end) {
  attention_blocks_path<Avx2Simd>(n_heads, kv, n_ctx, j_begin, j_end, state, sc, g_begin, g_end);
}

void attention_rows_blocks_avx2(size_t n_heads, const PagedKv& kv, size_t j_begin, size_t j_end,
                            float* const* states, size_t n_rows, float* sc) {
  static_assert(Avx2Simd::HB == kAttentionHeadsPerPassAvx2);
  attention_rows_blocks_path<Avx2Simd>(n_heads, kv, j_begin, j_end, states, n_rows, sc);
}

void attention_finish_avx2(size_t n_heads, size_t kv_heads, size_t head_dim, const float* state,
                       float* out, size_t g_begin, size_t g_end) {
  attention_finish_typed<Avx2Simd>(n_heads, kv_heads, head_dim, state, out, g_begin, g_end);
}

void accumulate_attention_avx2(const float* q, size_t ldq, size_t rows, const float* kt,
                    size_t D, size_t ncols, const size_t* len, const float* row_max,
                    const float* row_inv_sum, float* acc, size_t grp_begin,
                    size_t grp_end) {
  accumulate_attention_typed<Avx2Simd>(q, ldq, rows, kt, D, ncols, len, row_max, row_inv_sum, acc,
                                  grp_begin, grp_end);
}

}  // namespace vc::cpu

// Paged GQA attention of one query row for the AVX-512 path (16 lanes over head_dim, masked tails):
// the generic kernel of attention_kernel.hpp instantiated with Avx512Simd.
#include "kernels/cpu/simd_avx512.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/attention_kernel.hpp"
#include "kernels/cpu/attention_accumulate_kernel.hpp"

namespace vc::cpu {

void attention_avx512(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end) {
  attention_path<Avx512Simd>(q, n_heads, kv, n_ctx, scale, out, scratch, g_begin, g_end);
}

void attention_blocks_avx512(size_t n_heads, const PagedKv& kv, size_t n_ctx, size_t j_begin,
                       size_t j_end, float* state, float* sc, size_t g_begin, size_t g_end) {
  attention_blocks_path<Avx512Simd>(n_heads, kv, n_ctx, j_begin, j_end, state, sc, g_begin, g_end);
}

void attention_rows_blocks_avx512(size_t n_heads, const PagedKv& kv, size_t j_begin, size_t j_end,
                            float* const* states, size_t n_rows, float* sc) {
  static_assert(Avx512Simd::HB == kAttentionHeadsPerPassAvx512);
  attention_rows_blocks_path<Avx512Simd>(n_heads, kv, j_begin, j_end, states, n_rows, sc);
}

void attention_finish_avx512(size_t n_heads, size_t kv_heads, size_t head_dim, const float* state,
                       float* out, size_t g_begin, size_t g_end) {
  attention_finish_typed<Avx512Simd>(n_heads, kv_heads, head_dim, state, out, g_begin, g_end);
}

void score_sums_avx512(const float* in, float* wide, float* narrow) {
  using T = Avx512Simd;
  T::V r[4];
  for (int i = 0; i < 4; ++i) {
    const float* v = in + 64 * i;
    r[i] = T::reduce4_quarters(T::load(v), T::load(v + 16), T::load(v + 32), T::load(v + 48));
    T::reduce4(T::load(v), T::load(v + 16), T::load(v + 32), T::load(v + 48), narrow + 4 * i);
  }
  T::store(wide, T::reduce16_finish(T::reduce16_pair(r[0], r[1]), T::reduce16_pair(r[2], r[3])));
}

void accumulate_attention_avx512(const float* q, size_t ldq, size_t rows, const float* kt,
                      size_t D, size_t ncols, const size_t* len, const float* row_max,
                      const float* row_inv_sum, float* acc, size_t grp_begin,
                      size_t grp_end) {
  accumulate_attention_typed<Avx512Simd>(q, ldq, rows, kt, D, ncols, len, row_max, row_inv_sum, acc,
                                  grp_begin, grp_end);
}

}  // namespace vc::cpu

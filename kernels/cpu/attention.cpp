// Causal attention of one query row over a paged KV cache (GQA): validates the
// arguments and the block table, provides per-thread scratch, and dispatches to the
// active SIMD path (attention_kernel.hpp holds the arithmetic).
#include "kernels/cpu/attention.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention_paths.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"

namespace vc::cpu {

void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out) {
  if (kv.kv_heads == 0 || kv.head_dim == 0 || kv.block_tokens == 0 || n_heads == 0 ||
      n_heads % kv.kv_heads != 0) {
    throw Error("attention_row: bad shape: n_heads=" + std::to_string(n_heads) +
                " kv_heads=" + std::to_string(kv.kv_heads) + " head_dim=" +
                std::to_string(kv.head_dim) + " block_tokens=" +
                std::to_string(kv.block_tokens) +
                " (need all > 0 and n_heads a multiple of kv_heads)");
  }
  if (n_ctx == 0) {  // nothing to attend to: an empty sum
    std::memset(out, 0, n_heads * kv.head_dim * sizeof(float));
    return;
  }
  if (kv.k == nullptr || kv.v == nullptr || kv.block_table == nullptr) {
    throw Error("attention_row: null K, V or block table with n_ctx=" + std::to_string(n_ctx));
  }
  const size_t nblocks = (n_ctx + kv.block_tokens - 1) / kv.block_tokens;
  for (size_t j = 0; j < nblocks; ++j) {
    if (kv.block_table[j] < 0) {
      throw Error("attention_row: block_table[" + std::to_string(j) + "] = " +
                  std::to_string(kv.block_table[j]) + " (negative) within n_ctx=" +
                  std::to_string(n_ctx));
    }
  }

  // Per-thread scratch, kept across calls (no allocation in steady state).
  thread_local std::vector<float> scratch;
  const size_t need = attention_scratch_floats(kv.head_dim, kv.block_tokens);
  if (scratch.size() < need) scratch.resize(need);

  switch (active_simd_path()) {
    case SimdPath::avx512:
      return attention_row_avx512(q, n_heads, kv, n_ctx, scale, out, scratch.data());
    case SimdPath::avx2:
      return attention_row_avx2(q, n_heads, kv, n_ctx, scale, out, scratch.data());
    case SimdPath::scalar:
      break;
  }
  attention_row_scalar(q, n_heads, kv, n_ctx, scale, out, scratch.data());
}

}  // namespace vc::cpu

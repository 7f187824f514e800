// Paged GQA attention of one query row for the scalar path (baseline x86-64):
// the generic kernel of attention_kernel.hpp instantiated with ScalarSimd.
#include "kernels/cpu/simd_scalar.hpp"
// (the traits header first: the kernel template is instantiated with its type)
#include "kernels/cpu/attention_kernel.hpp"

namespace vc::cpu {

void attention_scalar(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                      float scale, float* out, float* scratch, size_t g_begin, size_t g_end) {
  attention_path<ScalarSimd>(q, n_heads, kv, n_ctx, scale, out, scratch, g_begin, g_end);
}

}  // namespace vc::cpu

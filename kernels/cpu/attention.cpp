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

namespace {

using AttnFn = void (*)(const float*, size_t, const PagedKv&, size_t, float, float*, float*,
                        size_t, size_t);

AttnFn attention_fn(SimdPath p) {
  switch (p) {
    case SimdPath::avx512:
      return attention_avx512;
    case SimdPath::avx2:
      return attention_avx2;
    case SimdPath::scalar:
      break;
  }
  return attention_scalar;
}

// Below this many positions one thread finishes before a hand-off would pay off.
constexpr size_t kMinParallelPositions = 512;

// Throws vc::Error for shapes or block tables the kernels cannot use; returns false
// when there is nothing to compute (n_ctx == 0, out zeroed).
bool validate(size_t n_heads, const PagedKv& kv, size_t n_ctx, float* out) {
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
    return false;
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
  return true;
}

struct Call {
  const float* q;
  size_t n_heads;
  const PagedKv* kv;
  size_t n_ctx;
  float scale;
  float* out;
  AttnFn fn;
};

void run_heads(const Call& c, size_t g_begin, size_t g_end) {
  // Per-thread scratch, kept across calls (no allocation in steady state).
  thread_local std::vector<float> scratch;
  const size_t need = attention_scratch_floats(c.n_heads, c.kv->head_dim, c.kv->block_tokens);
  if (scratch.size() < need) scratch.resize(need);
  c.fn(c.q, c.n_heads, *c.kv, c.n_ctx, c.scale, c.out, scratch.data(), g_begin, g_end);
}

}  // namespace

void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out) {
  attention_row(q, n_heads, kv, n_ctx, scale, out, nullptr);
}

void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out, ThreadPool* pool) {
  if (!validate(n_heads, kv, n_ctx, out)) return;
  const Call c{q, n_heads, &kv, n_ctx, scale, out, attention_fn(active_simd_path())};
  if (pool == nullptr || pool->threads() == 1 || kv.kv_heads == 1 ||
      n_ctx < kMinParallelPositions) {
    run_heads(c, 0, kv.kv_heads);
    return;
  }
  const Call* cp = &c;  // one pointer: the std::function stays allocation-free
  pool->parallel_for(kv.kv_heads, 1, [cp](size_t g0, size_t g1) { run_heads(*cp, g0, g1); });
}

}  // namespace vc::cpu

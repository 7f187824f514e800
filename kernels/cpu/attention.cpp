// Causal attention of one query row over a paged KV cache (GQA): validates the
// arguments and the block table, provides per-thread scratch, and dispatches to the
// active SIMD path (attention_kernel.hpp holds the arithmetic).
#include "kernels/cpu/attention.hpp"

#include <algorithm>
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

// One SIMD path's entry points (attention_paths.hpp) and query heads per pass.
struct AttnPath {
  AttnFn row;
  AttnBlocksFn blocks;
  AttnFinishFn finish;
  AttnRowsBlocksFn rows_blocks;
  size_t heads_per_pass;
};

const AttnPath& attn_path(SimdPath p) {
  static constexpr AttnPath kScalar{attention_scalar, attention_blocks_scalar,
                                    attention_finish_scalar, attention_rows_blocks_scalar,
                                    kAttentionHeadsPerPassScalar};
  static constexpr AttnPath kAvx2{attention_avx2, attention_blocks_avx2, attention_finish_avx2,
                                  attention_rows_blocks_avx2, kAttentionHeadsPerPassAvx2};
  static constexpr AttnPath kAvx512{attention_avx512, attention_blocks_avx512,
                                    attention_finish_avx512, attention_rows_blocks_avx512,
                                    kAttentionHeadsPerPassAvx512};
  switch (p) {
    case SimdPath::avx512bf16:
    case SimdPath::amx:
    case SimdPath::avx512:
      return kAvx512;
    case SimdPath::avx2:
      return kAvx2;
    case SimdPath::scalar:
      break;
  }
  return kScalar;
}

// Throws vc::Error for shapes the kernels cannot use.
void check_shape(size_t n_heads, const PagedKv& kv) {
  if (kv.kv_heads == 0 || kv.head_dim == 0 || kv.block_tokens == 0 || n_heads == 0 ||
      n_heads % kv.kv_heads != 0) {
    throw Error("attention_row: bad shape: n_heads=" + std::to_string(n_heads) +
                " kv_heads=" + std::to_string(kv.kv_heads) + " head_dim=" +
                std::to_string(kv.head_dim) + " block_tokens=" +
                std::to_string(kv.block_tokens) +
                " (need all > 0 and n_heads a multiple of kv_heads)");
  }
}

// Throws vc::Error for shapes or block tables the kernels cannot use; returns false
// when there is nothing to compute (n_ctx == 0, out zeroed).
bool validate(size_t n_heads, const PagedKv& kv, size_t n_ctx, float* out) {
  check_shape(n_heads, kv);
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
  float* max_sum;  // optional: [n_heads][2]
  AttnFn fn;
};

void run_heads(const Call& c, size_t g_begin, size_t g_end) {
  // Per-thread scratch, kept across calls (no allocation in steady state).
  thread_local std::vector<float> scratch;
  const size_t need = attention_scratch_floats(c.n_heads, c.kv->head_dim, c.kv->block_tokens);
  if (scratch.size() < need) scratch.resize(need);
  c.fn(c.q, c.n_heads, *c.kv, c.n_ctx, c.scale, c.out, scratch.data(), g_begin, g_end);
  if (c.max_sum != nullptr) {
    const size_t group = c.n_heads / c.kv->kv_heads;
    const float* stats = scratch.data() + 2 * c.n_heads * ((c.kv->head_dim + 15) / 16 * 16);
    std::copy(stats + 2 * g_begin * group, stats + 2 * g_end * group,
              c.max_sum + 2 * g_begin * group);
  }
}

}  // namespace

void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out) {
  attention_row(q, n_heads, kv, n_ctx, scale, out, nullptr);
}

void attention_row(const float* q, size_t n_heads, const PagedKv& kv, size_t n_ctx,
                   float scale, float* out, ThreadPool* pool, float* max_sum) {
  if (!validate(n_heads, kv, n_ctx, out)) {
    if (max_sum != nullptr)
      for (size_t h = 0; h < n_heads; ++h) {
        max_sum[2 * h] = -__builtin_inff();
        max_sum[2 * h + 1] = 0.f;
      }
    return;
  }
  const Call c{q, n_heads, &kv, n_ctx, scale, out, max_sum, attn_path(active_simd_path()).row};
  if (pool == nullptr || pool->threads() == 1 || kv.kv_heads == 1 ||
      n_ctx < kMinParallelPositions) {
    run_heads(c, 0, kv.kv_heads);
    return;
  }
  const Call* cp = &c;  // one pointer: the std::function stays allocation-free
  pool->parallel_for(kv.kv_heads, 1, [cp](size_t g0, size_t g1) { run_heads(*cp, g0, g1); });
}

// ---- AttentionRowState ---------------------------------------------------------

void AttentionRowState::begin(const float* q, size_t n_heads, const PagedKv& shape, size_t n_ctx,
                              float scale) {
  check_shape(n_heads, shape);
  n_heads_ = n_heads;
  kv_heads_ = shape.kv_heads;
  head_dim_ = shape.head_dim;
  block_tokens_ = shape.block_tokens;
  n_ctx_ = n_ctx;
  n_blocks_ = (n_ctx + block_tokens_ - 1) / block_tokens_;
  next_block_ = 0;
  state_.resize(attention_state_floats(n_heads, head_dim_));
  attention_state_init(q, n_heads, kv_heads_, head_dim_, scale, state_.data(), 0, kv_heads_);
}

void AttentionRowState::check_blocks(const char* fn, const PagedKv& kv, size_t block_begin,
                                     size_t block_end) {
  const std::string at = std::string("AttentionRowState::") + fn + ": ";
  if (kv.k == nullptr || kv.v == nullptr || kv.block_table == nullptr)
    throw Error(at + "null K, V or block table");
  for (size_t j = block_begin; j < block_end; ++j)
    if (kv.block_table[j] < 0)
      throw Error(at + "block_table[" + std::to_string(j) + "] = " +
                  std::to_string(kv.block_table[j]) + " (negative)");
}

void AttentionRowState::add(const PagedKv& kv, size_t block_begin, size_t block_end,
                            ThreadPool* pool) {
  if (kv.kv_heads != kv_heads_ || kv.head_dim != head_dim_ || kv.block_tokens != block_tokens_)
    throw Error("AttentionRowState::add: the KV's shape differs from the one begin() saw");
  if (block_begin != next_block_ && block_begin < n_blocks_)
    throw Error("AttentionRowState::add: blocks must come in order: expected block " +
                std::to_string(next_block_) + ", got " + std::to_string(block_begin));
  block_end = std::min(block_end, n_blocks_);
  if (block_begin >= block_end) return;
  check_blocks("add", kv, block_begin, block_end);
  const AttnBlocksFn fn = attn_path(active_simd_path()).blocks;
  auto run = [&](size_t g0, size_t g1) {
    thread_local std::vector<float> sc;
    const size_t need = kAttentionMaxHeadsPerPass * ((block_tokens_ + 15) / 16 * 16);
    if (sc.size() < need) sc.resize(need);
    fn(n_heads_, kv, n_ctx_, block_begin, block_end, state_.data(), sc.data(), g0, g1);
  };
  const size_t positions = (block_end - block_begin) * block_tokens_;
  if (pool == nullptr || pool->threads() == 1 || kv_heads_ == 1 ||
      positions < kMinParallelPositions) {
    run(0, kv_heads_);
  } else {
    pool->parallel_for(kv_heads_, 1, run);
  }
  next_block_ = block_end;
}

size_t attention_rows_per_pass(size_t n_heads, size_t kv_heads) {
  const size_t pass = attn_path(active_simd_path()).heads_per_pass;
  if (kv_heads == 0 || n_heads % kv_heads != 0) return 1;
  const size_t group = n_heads / kv_heads;
  static_assert(kAttentionHeadsPerPassAvx512 <= kAttentionMaxRowsPerPass &&
                kAttentionHeadsPerPassAvx2 <= kAttentionMaxRowsPerPass &&
                kAttentionHeadsPerPassScalar <= kAttentionMaxRowsPerPass);
  return group >= pass ? 1 : pass / group;
}

void AttentionRowState::add_rows(std::span<AttentionRowState* const> rows, const PagedKv& kv,
                                 size_t block_begin, size_t block_end) {
  if (rows.empty()) return;
  const AttentionRowState& r0 = *rows[0];
  // The rows with blocks left from block_begin (as add(), a row past its last block
  // takes none), and blocks [block_begin, whole), whole for each of them.
  thread_local std::vector<AttentionRowState*> active;
  active.clear();
  size_t whole = block_end;
  for (AttentionRowState* r : rows) {
    if (r->n_heads_ != r0.n_heads_ || r->kv_heads_ != r0.kv_heads_ || r->head_dim_ != r0.head_dim_ ||
        r->block_tokens_ != r0.block_tokens_)
      throw Error("AttentionRowState::add_rows: rows begun over different shapes");
    for (const AttentionRowState* seen : active)
      if (seen == r) throw Error("AttentionRowState::add_rows: a row is listed twice");
    if (block_begin >= r->n_blocks_) continue;
    if (r->next_block_ != block_begin)
      throw Error("AttentionRowState::add_rows: a row is at block " + std::to_string(r->next_block_) +
                  ", not at block_begin " + std::to_string(block_begin));
    active.push_back(r);
    whole = std::min(whole, r->n_ctx_ / r->block_tokens_);
  }
  if (active.size() > 1 && whole > block_begin &&
      attention_rows_per_pass(r0.n_heads_, r0.kv_heads_) > 1) {
    if (kv.kv_heads != r0.kv_heads_ || kv.head_dim != r0.head_dim_ ||
        kv.block_tokens != r0.block_tokens_)
      throw Error("AttentionRowState::add_rows: the KV's shape differs from the one begin() saw");
    check_blocks("add_rows", kv, block_begin, whole);
    thread_local std::vector<float*> states;
    thread_local std::vector<float> sc;
    states.clear();
    for (AttentionRowState* r : active) states.push_back(r->state_.data());
    const size_t need = kAttentionMaxHeadsPerPass * ((r0.block_tokens_ + 15) / 16 * 16);
    if (sc.size() < need) sc.resize(need);
    attn_path(active_simd_path()).rows_blocks(r0.n_heads_, kv, block_begin, whole, states.data(),
                                       states.size(), sc.data());
    for (AttentionRowState* r : active) r->next_block_ = whole;
    block_begin = whole;
  }
  for (AttentionRowState* r : active) r->add(kv, block_begin, block_end);
}

void AttentionRowState::max_sum(float* out) const {
  const float* stats = state_.data() + 2 * n_heads_ * ((head_dim_ + 15) / 16 * 16);
  std::copy_n(stats, 2 * n_heads_, out);
}

void AttentionRowState::finish(float* out) const {
  if (n_ctx_ == 0) {
    std::memset(out, 0, n_heads_ * head_dim_ * sizeof(float));
    return;
  }
  if (next_block_ < n_blocks_)
    throw Error("AttentionRowState::finish: blocks " + std::to_string(next_block_) + ".." +
                std::to_string(n_blocks_ - 1) + " were never added");
  attn_path(active_simd_path()).finish(n_heads_, kv_heads_, head_dim_, state_.data(), out, 0, kv_heads_);
}

}  // namespace vc::cpu

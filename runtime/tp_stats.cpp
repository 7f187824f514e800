// Joining the ranks' statistics (see tp_stats.hpp).
#include "runtime/tp_stats.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "runtime/tp_comm.hpp"

namespace vc {

namespace {

// `local` is [outer][local_heads][inner] on every rank; returns [outer][heads][inner]
// with rank r's heads at [r * local_heads, (r + 1) * local_heads).
std::vector<float> join_heads(const std::vector<float>& local, size_t outer, size_t local_heads,
                              size_t inner, const TensorParallelRank& tp) {
  const size_t d = size_t(tp.degree), n = local.size();
  std::vector<float> all(d * n);
  tp.comm->all_gather(tp.rank, local.data(), n, all.data());
  std::vector<float> out(d * n);
  const size_t block = local_heads * inner;
  for (size_t r = 0; r < d; ++r)
    for (size_t o = 0; o < outer; ++o)
      std::copy_n(&all[r * n + o * block], block, &out[(o * d + r) * block]);
  return out;
}

}  // namespace

PrefillStats gather_stats(PrefillStats s, const Model& model) {
  const TensorParallelRank* tp = model.tp();
  if (tp == nullptr || tp->degree == 1) return s;
  // Hidden-state scores need no gathering: every rank scored the whole hidden states
  // (the same on every rank) with the whole surrogate, one output per KV head of
  // the whole model.
  if (!s.hidden_scores.empty() && s.hidden_outputs != tp->global_kv_heads)
    throw Error("tensor parallelism: hidden-state scores have " + std::to_string(s.hidden_outputs) +
                " outputs per position, not one per KV head of the whole model (" +
                std::to_string(tp->global_kv_heads) + ")");
  const size_t L = s.layers, D = s.head_dim, H = s.heads, G = s.kv_heads, n = s.n_pos;
  if (!s.window_queries.empty()) s.window_queries = join_heads(s.window_queries, L * s.window, H, D, *tp);
  if (!s.query_mean.empty()) {
    s.query_mean = join_heads(s.query_mean, L, H, D, *tp);
    s.query_sq_mean = join_heads(s.query_sq_mean, L, H, D, *tp);
  }
  const size_t GG = tp->global_kv_heads;
  if (!s.accumulated_attention.empty()) {
    const size_t d = size_t(tp->degree), per = s.accumulated_attention.size();
    std::vector<float> all(d * per);
    tp->comm->all_gather(tp->rank, s.accumulated_attention.data(), per, all.data());
    std::vector<float> out(L * GG * n, 0.f);
    for (size_t r = 0; r < d; ++r) {  // rank order: the sum of a replicated head is fixed
      const size_t first = shard_first_kv_head(r, d, GG);
      for (size_t l = 0; l < L; ++l)
        for (size_t g = 0; g < G; ++g) {
          const float* src = &all[r * per + (l * G + g) * n];
          float* dst = &out[(l * GG + first + g) * n];
          for (size_t p = 0; p < n; ++p) dst[p] += src[p];
        }
    }
    s.accumulated_attention = std::move(out);
  }
  s.heads = H * size_t(tp->degree);
  s.kv_heads = GG;
  return s;
}

}  // namespace vc

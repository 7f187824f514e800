// Snapshot, model facts and compression of a request's prompt KV.
#include "runtime/compression.hpp"

#include <string>

#include "kernels/error.hpp"

namespace vc {

KvSnapshot snapshot_kv(const PagedKvCache& cache, const KvSequence& seq, size_t n_pos) {
  const KvCacheConfig& c = cache.config();
  if (n_pos > seq.length)
    throw Error("snapshot_kv: " + std::to_string(n_pos) + " positions asked, the sequence holds " +
                std::to_string(seq.length));
  KvSnapshot s;
  s.layers = c.num_layers;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.n_pos = n_pos;
  s.k.resize(s.layers * s.kv_heads * n_pos * s.head_dim);
  s.v.resize(s.k.size());
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  for (size_t l = 0; l < s.layers; ++l)
    for (size_t p = 0; p < n_pos; ++p) {
      cache.read(l, seq, p, k.data(), v.data());
      for (size_t g = 0; g < s.kv_heads; ++g) {
        std::copy_n(&k[g * s.head_dim], s.head_dim, &s.k[s.index(l, g, p)]);
        std::copy_n(&v[g * s.head_dim], s.head_dim, &s.v[s.index(l, g, p)]);
      }
    }
  return s;
}

ModelFacts model_facts(const Model& model, size_t n_pos) {
  ModelFacts f;
  f.heads = size_t(model.config().num_heads);
  f.rope_inv_freq = model.rope_inv_freq();
  f.positions.resize(n_pos);
  for (size_t p = 0; p < n_pos; ++p) f.positions[p] = int32_t(p);
  for (const auto& l : model.weights().layers)
    f.wo.push_back({l.wo.data, l.wo.dtype, l.wo.rows, l.wo.cols});
  return f;
}

CompressedView compress(const Compressor& compressor, const KvSnapshot& kv,
                        const PrefillStats* stats, const ModelFacts& facts, double ratio) {
  if (compressor.needs_stats() && stats == nullptr)
    throw Error("compressor '" + std::string(compressor.name()) +
                "' needs prefill statistics, and none were gathered");
  const CompressorInput in{kv, stats, facts, ratio};
  const CompressionPlan plan = compressor.plan(in);
  return CompressedView::build(kv, plan, compressor, facts);
}

}  // namespace vc

// Row-count cost curve of the forward pass (see row_cost.hpp).
#include "runtime/row_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "kernels/error.hpp"
#include "runtime/forward.hpp"

namespace vc {
namespace {

// Fills positions [0, n) of `seq` with deterministic values in about [-1, 1).
void fill_synthetic_kv(PagedKvCache& cache, KvSequence& seq, size_t n) {
  const KvCacheConfig& kc = cache.config();
  const size_t width = kc.kv_heads * kc.head_dim;
  std::vector<float> k(width), v(width);
  uint64_t state = 0x243F6A8885A308D3ull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int32_t(state >> 32)) * (1.0f / 2147483648.0f);
  };
  cache.reserve(seq, n);
  for (size_t l = 0; l < kc.num_layers; ++l)
    for (size_t p = 0; p < n; ++p) {
      for (size_t i = 0; i < width; ++i) {
        k[i] = next();
        v[i] = next();
      }
      cache.write(l, seq, p, k.data(), v.data());
    }
}

}  // namespace

std::vector<double> measure_row_costs(const Model& model, size_t context,
                                      const std::vector<size_t>& rows, int repeats, int threads) {
  const ModelConfig& c = model.config();
  if (rows.empty()) return {};
  if (repeats < 1) throw Error("measure_row_costs: repeats must be >= 1");
  const size_t max_rows = *std::max_element(rows.begin(), rows.end());
  if (*std::min_element(rows.begin(), rows.end()) == 0)
    throw Error("measure_row_costs: a row count must be >= 1");
  c.require_context(context + max_rows,
                    "--context: " + std::to_string(context) + " + " + std::to_string(max_rows) + " rows");

  PagedKvCache cache(model.kv_config(context + max_rows + 16, DType::bf16));
  Workspace ws(threads);
  KvSequence seq;
  fill_synthetic_kv(cache, seq, context);

  std::vector<ForwardRow> batch;
  std::vector<float> logits;
  std::vector<double> out;
  for (size_t n : rows) {
    batch.clear();
    for (size_t i = 0; i < n; ++i)
      batch.push_back(ForwardRow{int32_t((i * 131 + 7) % size_t(c.vocab_size)),
                                 int32_t(context + i), &seq, true});
    std::vector<double> t;
    for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
      cache.reserve(seq, context + n);
      const auto t0 = std::chrono::steady_clock::now();
      forward(model, batch, cache, ws, logits);
      const auto t1 = std::chrono::steady_clock::now();
      cache.truncate(seq, context);
      if (r > 0) t.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(t.begin(), t.end());
    out.push_back(t[t.size() / 2]);
  }
  cache.free(seq);
  return out;
}

}  // namespace vc

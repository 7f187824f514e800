// KVzap calibration: targets from a reconstruction pass, then one fit per layer
// (see kvzap_calibration.hpp).
#include "runtime/kvzap_calibration.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressors/kvzip_score.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/compression.hpp"
#include "runtime/prefill_stats.hpp"

namespace vc {
namespace {

// A HiddenScorer that hands back the hidden state itself: the collector then keeps
// every row's input of every layer ([layers][dim][n_pos]).
class HiddenCapture final : public HiddenScorer {
 public:
  explicit HiddenCapture(size_t dim) : dim_(dim) {}
  [[nodiscard]] size_t outputs() const override { return dim_; }
  void score(size_t /*layer*/, const float* x, size_t rows, size_t dim, float* out) const override {
    std::copy_n(x, rows * dim, out);
  }

 private:
  size_t dim_;
};

// KVzip+ scores of positions [0, n) of layer l's KV heads (kvzap_calibration.hpp):
// score[g][p] = max over window rows w and the query heads h of g of
// a_h(w, p) * ||W_o,h v_p|| / ||x_w||, with a_h(w, .) the softmax of row w's query
// over the positions it sees (fp32 dot products, exp in double, as layer_stats) and
// x_w the row's input hidden state.
void kvzip_plus_scores(const Model& model, const PrefillStats& stats, const LayerKv& kv, size_t n,
                       std::vector<std::vector<float>>& score) {
  const ModelConfig& c = model.config();
  const size_t l = kv.layer, G = kv.kv_heads, D = kv.head_dim, H = stats.heads, group = H / G;
  const size_t hidden = size_t(c.hidden_size), W = stats.window, N = kv.n_pos;
  const Weight& wo = model.weights().layers[l].wo;  // [hidden, H * D]
  std::vector<float> wo_f(wo.rows * wo.cols);
  to_f32(wo.dtype, wo.data, wo_f.data(), wo_f.size());
  // ||x_w|| of each window row.
  std::vector<double> x_norm(W, 0.0);
  for (size_t d = 0; d < hidden; ++d) {
    const float* x = stats.hidden(l, d);
    for (size_t w = 0; w < W; ++w) x_norm[w] += double(x[stats.window_start + w]) * x[stats.window_start + w];
  }
  for (double& v : x_norm) v = std::sqrt(v);
  const float scale = float(1.0 / std::sqrt(double(D)));
  score.assign(G, std::vector<float>(n, 0.0f));
  std::vector<double> wov(n), a(N);
  for (size_t h = 0; h < H; ++h) {
    const size_t g = h / group;
    for (size_t p = 0; p < n; ++p) {  // ||W_o,h v_p||
      const float* v = kv.v_at(g, p);
      double sq = 0;
      for (size_t r = 0; r < hidden; ++r) {
        const float* row = &wo_f[r * wo.cols + h * D];
        double u = 0;
        for (size_t d = 0; d < D; ++d) u += double(row[d]) * v[d];
        sq += u * u;
      }
      wov[p] = std::sqrt(sq);
    }
    for (size_t w = 0; w < W; ++w) {
      const float* q = stats.window_query(l, w, h);
      const size_t last = std::min(stats.window_start + w, N - 1);
      double mx = -INFINITY;
      for (size_t t = 0; t <= last; ++t) {
        const float* k = kv.k_at(g, t);
        float dot = 0.f;
        for (size_t d = 0; d < D; ++d) dot += q[d] * k[d];
        a[t] = double(dot * scale);
        mx = std::max(mx, a[t]);
      }
      double sum = 0;
      for (size_t t = 0; t <= last; ++t) sum += a[t] = std::exp(a[t] - mx);
      const double inv = x_norm[w] > 0 ? 1.0 / (sum * x_norm[w]) : 0.0;
      for (size_t p = 0; p < std::min(n, last + 1); ++p)
        score[g][p] = std::max(score[g][p], float(a[p] * inv * wov[p]));
    }
  }
}

}  // namespace

KvzapTargets parse_kvzap_targets(const std::string& s) {
  if (s == "kvzip") return KvzapTargets::kvzip;
  if (s == "kvzip-plus") return KvzapTargets::kvzip_plus;
  throw Error("kvzap targets: '" + s + "' is not one of kvzip, kvzip-plus");
}

std::vector<std::vector<int32_t>> kvzap_generated_texts(Generator& gen, size_t count,
                                                        size_t tokens, uint64_t seed) {
  if (tokens < 2) throw Error("kvzap calibration: generated texts need at least 2 tokens");
  const std::vector<int32_t> bos = {gen.model().config().bos_token_id};
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < count; ++i) {
    GenerateOptions o;
    o.max_tokens = int(tokens - 1);
    o.stop_at_eos = false;
    o.sampling = SamplingParams{1.0f, 0, 1.0f, seed + i};
    const GenerateResult r = gen.generate(bos, o);
    std::vector<int32_t> ids = bos;
    ids.insert(ids.end(), r.output_ids.begin(), r.output_ids.end());
    out.push_back(std::move(ids));
  }
  return out;
}

std::vector<KvzapSamples> kvzap_samples(const Model& model,
                                        const std::vector<std::vector<int32_t>>& texts,
                                        Workspace& ws, KvzapTargets targets) {
  const ModelConfig& c = model.config();
  const size_t L = size_t(c.num_layers), D = size_t(c.hidden_size), G = size_t(c.num_kv_heads);
  std::vector<KvzapSamples> out(L);
  for (KvzapSamples& s : out) s.dim = D, s.outputs = G;
  const HiddenCapture capture(D);
  const StatsNeeds needs{.window = true, .accumulated = true, .hidden = true};
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::vector<int32_t>& text = texts[t];
    const size_t n = text.size();
    if (n == 0) throw Error("kvzap calibration: text " + std::to_string(t) + " has no tokens");
    std::vector<int32_t> ids(text);
    ids.insert(ids.end(), text.begin(), text.end());
    PagedKvCache cache(model.kv_config(ids.size(), DType::bf16));
    KvSequence seq;
    PrefillStatsCollector collector(c, ids.size(), n, needs, &ws.pool(), &capture);
    ws.stats = &collector;
    try {
      (void)prefill(model, ids, seq, cache, ws, 256);
    } catch (...) {
      ws.stats = nullptr;
      throw;
    }
    ws.stats = nullptr;
    const PrefillStats stats = collector.finish();
    const LayerKvReader read = cache_layer_reader(cache, seq);
    LayerKv kv;
    std::vector<float> score;
    std::vector<std::vector<float>> plus;
    for (size_t l = 0; l < L; ++l) {
      read(l, ids.size(), 0, G, kv);
      if (targets == KvzapTargets::kvzip_plus) kvzip_plus_scores(model, stats, kv, n, plus);
      std::optional<LayerStats> ls;
      if (targets == KvzapTargets::kvzip) ls = layer_stats(stats, kv, {.window = true, .accumulated = true});
      KvzapSamples& s = out[l];
      const size_t r0 = s.rows;
      s.rows += n;
      s.x.resize(s.rows * D);
      s.y.resize(s.rows * G);
      for (size_t d = 0; d < D; ++d) {
        const float* h = stats.hidden(l, d);
        for (size_t p = 0; p < n; ++p) s.x[(r0 + p) * D + d] = h[p];
      }
      for (size_t g = 0; g < G; ++g) {
        if (targets == KvzapTargets::kvzip_plus) score = plus[g];
        else kvzip_scores(*ls, g, score);
        for (size_t p = 0; p < n; ++p)
          s.y[(r0 + p) * G + g] = float(std::log(std::max(double(score[p]), 1e-12)));
      }
    }
    cache.free(seq);
  }
  return out;
}

KvzapFit fit_kvzap(const Model& model, const std::vector<KvzapSamples>& samples,
                   const KvzapFitOptions& opt, Workspace& ws) {
  const ModelConfig& c = model.config();
  const size_t L = size_t(c.num_layers);
  if (samples.size() != L)
    throw Error("fit_kvzap: samples for " + std::to_string(samples.size()) + " layers, the model has " +
                std::to_string(L));
  KvzapFit fit;
  KvzapSurrogate& m = fit.surrogate;
  m.form = opt.form;
  m.dim = size_t(c.hidden_size);
  m.kv_heads = size_t(c.num_kv_heads);
  m.units = opt.form == KvzapForm::mlp ? opt.mlp.units : 0;
  m.layers.resize(L);
  ws.pool().parallel_for(L, 1, [&](size_t begin, size_t end) {
    for (size_t l = begin; l < end; ++l)
      m.layers[l] = opt.form == KvzapForm::linear ? fit_ridge(samples[l], opt.ridge_lambda)
                                                  : train_mlp(samples[l], opt.mlp);
  });
  m.validate();
  for (size_t l = 0; l < L; ++l) fit.r2.push_back(r_squared(samples[l], predict(m, l, samples[l])));
  return fit;
}

}  // namespace vc

// Layer-by-layer planning against the whole-request planners it replaced: the
// planners below are the methods' plan() as they were when a compressor saw every
// layer's KV and statistics at once (kept here as the reference). On a small
// random request every method and every drop+quantize composition must give the
// identical plan, and the view built layer by layer must equal the view built from
// the whole snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"
#include "kvtiers/layer_compression.hpp"

namespace vc {
namespace {

/// Statistics laid out for every layer at once, as the whole-request planners read them.
struct WholeStats {
  size_t layers = 0, heads = 0, kv_heads = 0, n_pos = 0, window = 0;
  std::vector<float> window_attention;       // [layers][kv_heads][window][n_pos]
  std::vector<float> accumulated_attention;  // [layers][kv_heads][n_pos]
  std::vector<float> query_mean, query_sq_mean;  // [layers][heads][head_dim]
  std::vector<float> hidden_scores;              // [layers][kv_heads][n_pos] (KVzap)
  const float* window_row(size_t l, size_t g, size_t w) const {
    return &window_attention[((l * kv_heads + g) * window + w) * n_pos];
  }
  const float* accumulated(size_t l, size_t g) const {
    return &accumulated_attention[(l * kv_heads + g) * n_pos];
  }
};

using Keep = std::vector<std::vector<std::vector<int32_t>>>;

Keep empty_keep(const KvSnapshot& kv) {
  return Keep(kv.layers, std::vector<std::vector<int32_t>>(kv.kv_heads));
}

// --- The whole-request planners (default parameters), as they were. ---

Keep ref_streaming_llm(const KvSnapshot& kv, double ratio, size_t sinks_param = 4) {
  const size_t n = kv.n_pos;
  std::vector<int32_t> keep;
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  const size_t sinks = std::min(sinks_param, budget);
  for (size_t p = 0; p < sinks; ++p) keep.push_back(int32_t(p));
  for (size_t p = n - (budget - sinks); p < n; ++p) keep.push_back(int32_t(p));
  return Keep(kv.layers, std::vector<std::vector<int32_t>>(kv.kv_heads, keep));
}

Keep ref_snapkv(const KvSnapshot& kv, const WholeStats& s, double ratio, size_t window = 32,
                size_t kernel = 7) {
  const size_t n = kv.n_pos;
  Keep plan = empty_keep(kv);
  const size_t w = std::min({s.window, window, n});
  const size_t prefix = n - w;
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  std::vector<int32_t> forced;
  for (size_t p = n; p-- > prefix;) forced.push_back(int32_t(p));
  const size_t half = kernel / 2;
  std::vector<float> votes(n), pooled(n);
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(votes.begin(), votes.end(), 0.0f);
      for (size_t r = s.window - w; r < s.window; ++r) {
        const float* row = s.window_row(l, g, r);
        for (size_t p = 0; p < prefix; ++p) votes[p] += row[p];
      }
      std::fill(pooled.begin(), pooled.end(), std::numeric_limits<float>::lowest());
      for (size_t p = 0; p < prefix; ++p) {
        const size_t lo = p >= half ? p - half : 0, hi = std::min(prefix, p + half + 1);
        pooled[p] = *std::max_element(votes.begin() + long(lo), votes.begin() + long(hi));
      }
      plan[l][g] = select_positions(pooled, budget, forced);
    }
  return plan;
}

Keep ref_h2o(const KvSnapshot& kv, const WholeStats& s, double ratio, double recent_fraction = 0.5) {
  const size_t n = kv.n_pos;
  Keep plan = empty_keep(kv);
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  const size_t recent = std::min(budget, size_t(std::lround(recent_fraction * double(budget))));
  std::vector<int32_t> forced;
  for (size_t p = n; p-- > n - recent;) forced.push_back(int32_t(p));
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const float* acc = s.accumulated(l, g);
      plan[l][g] = select_positions(std::vector<float>(acc, acc + n), budget, forced);
    }
  return plan;
}

Keep ref_expected_attention(const KvSnapshot& kv, const WholeStats& s, double ratio,
                            size_t sinks_param = 4) {
  const size_t n = kv.n_pos, d = kv.head_dim;
  Keep plan = empty_keep(kv);
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  const size_t group = s.heads / kv.kv_heads;
  const size_t sinks = std::min(sinks_param, n);
  std::vector<int32_t> forced;
  for (size_t p = 0; p < sinks; ++p) forced.push_back(int32_t(p));
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  std::vector<double> logits(n), mean(n);
  std::vector<float> scores(n);
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(mean.begin(), mean.end(), 0.0);
      for (size_t j = 0; j < group; ++j) {
        const size_t h = g * group + j;
        const float* mu = &s.query_mean[(l * s.heads + h) * d];
        const float* sq = &s.query_sq_mean[(l * s.heads + h) * d];
        double top = -std::numeric_limits<double>::infinity();
        for (size_t p = sinks; p < n; ++p) {
          const float* k = kv.k_at(l, g, p);
          double lin = 0, quad = 0;
          for (size_t i = 0; i < d; ++i) {
            const double var = std::max(0.0, double(sq[i]) - double(mu[i]) * double(mu[i]));
            lin += double(mu[i]) * double(k[i]);
            quad += var * double(k[i]) * double(k[i]);
          }
          logits[p] = lin * inv_sqrt_d + 0.5 * quad / double(d);
          top = std::max(top, logits[p]);
        }
        double total = 0;
        for (size_t p = sinks; p < n; ++p) total += (logits[p] = std::exp(logits[p] - top));
        for (size_t p = sinks; p < n; ++p) mean[p] += logits[p] / total / double(group);
      }
      for (size_t p = sinks; p < n; ++p) {
        const float* v = kv.v_at(l, g, p);
        double norm = 0;
        for (size_t i = 0; i < d; ++i) norm += double(v[i]) * double(v[i]);
        scores[p] = float(mean[p] * std::sqrt(norm));
      }
      plan[l][g] = select_positions(scores, budget, forced);
    }
  return plan;
}

Keep ref_kvzip(const KvSnapshot& kv, const WholeStats& s, double ratio) {
  const size_t n = kv.n_pos;
  Keep plan = empty_keep(kv);
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  std::vector<float> scores(n);
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const float* acc = s.accumulated(l, g);
      for (size_t p = 0; p < n; ++p) scores[p] = acc[p] / float(n - p);
      for (size_t w = 0; w < s.window; ++w) {
        const float* row = s.window_row(l, g, w);
        for (size_t p = 0; p < n; ++p) scores[p] = std::max(scores[p], row[p]);
      }
      for (float& x : scores)
        if (std::isnan(x)) x = std::numeric_limits<float>::lowest();
      std::vector<int32_t> keep = keep_top(scores, budget);
      std::sort(keep.begin(), keep.end());
      plan[l][g] = std::move(keep);
    }
  return plan;
}

std::vector<size_t> ref_top_free(const std::vector<float>& scores, const std::vector<char>& taken,
                                 size_t count) {
  std::vector<float> rest;
  std::vector<size_t> where;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (taken[i]) continue;
    rest.push_back(std::isnan(scores[i]) ? std::numeric_limits<float>::lowest() : scores[i]);
    where.push_back(i);
  }
  std::vector<size_t> out;
  if (count == 0) return out;
  for (int32_t i : keep_top(rest, std::min(count, rest.size()))) out.push_back(where[size_t(i)]);
  return out;
}

Keep ref_laprox(const KvSnapshot& kv, const WholeStats& s, const ModelFacts& model, double ratio,
                size_t sinks = 4, size_t recent = 8, size_t min_per_head = 1) {
  const size_t n = kv.n_pos, heads_kv = kv.layers * kv.kv_heads, d = kv.head_dim;
  const size_t heads = model.heads, group = heads / kv.kv_heads;
  Keep plan = empty_keep(kv);
  // Contributions [layers][kv_heads][n_pos], normalised per layer.
  std::vector<float> scores(kv.layers * kv.kv_heads * n, 0.0f);
  std::vector<float> row, gram(heads * d * d);
  std::vector<double> attn(n);
  for (size_t l = 0; l < kv.layers; ++l) {
    const ModelFacts::Matrix& w = model.wo[l];
    row.resize(w.cols);
    std::fill(gram.begin(), gram.end(), 0.0f);
    const auto* bytes = static_cast<const unsigned char*>(w.data);
    for (size_t r = 0; r < w.rows; ++r) {
      to_f32(w.dtype, bytes + r * w.cols * dtype_size(w.dtype), row.data(), w.cols);
      for (size_t h = 0; h < heads; ++h) {
        const float* x = &row[h * d];
        float* m = &gram[h * d * d];
        for (size_t i = 0; i < d; ++i)
          for (size_t j = 0; j < d; ++j) m[i * d + j] += x[i] * x[j];
      }
    }
    double total = 0;
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(attn.begin(), attn.end(), 0.0);
      for (size_t r = 0; r < s.window; ++r) {
        const float* a = s.window_row(l, g, r);
        for (size_t p = 0; p < n; ++p) attn[p] += double(a[p]) / double(s.window);
      }
      float* c = &scores[(l * kv.kv_heads + g) * n];
      for (size_t p = 0; p < n; ++p) {
        const float* v = kv.v_at(l, g, p);
        double norms = 0;
        for (size_t h = g * group; h < (g + 1) * group; ++h) {
          const float* m = &gram[h * d * d];
          double q = 0;
          for (size_t i = 0; i < d; ++i) {
            double mv = 0;
            for (size_t j = 0; j < d; ++j) mv += double(m[i * d + j]) * double(v[j]);
            q += double(v[i]) * mv;
          }
          norms += std::sqrt(std::max(0.0, q));
        }
        const double contribution = attn[p] * norms / double(group);
        c[p] = float(contribution);
        total += double(c[p]);  // the layer's total of the stored (float) contributions
      }
    }
    if (total > 0) {
      float* c = &scores[l * kv.kv_heads * n];
      for (size_t i = 0; i < kv.kv_heads * n; ++i) c[i] = float(double(c[i]) / total);
    }
  }
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  std::vector<char> taken(scores.size(), 0);
  size_t used = 0;
  std::vector<char> head_taken(n);
  std::vector<float> head_scores(n);
  for (size_t hg = 0; hg < heads_kv; ++hg) {
    std::fill(head_taken.begin(), head_taken.end(), 0);
    size_t count = 0;
    auto force = [&](size_t p) {
      if (count < budget && !head_taken[p]) {
        head_taken[p] = 1;
        ++count;
      }
    };
    for (size_t p = 0; p < std::min(sinks, n); ++p) force(p);
    for (size_t p = n; p-- > n - std::min(recent, n);) force(p);
    const size_t floor = std::min(min_per_head, budget);
    if (count < floor) {
      std::copy_n(scores.begin() + long(hg * n), n, head_scores.begin());
      for (size_t p : ref_top_free(head_scores, head_taken, floor - count)) force(p);
    }
    for (size_t p = 0; p < n; ++p) taken[hg * n + p] = head_taken[p];
    used += count;
  }
  for (size_t i : ref_top_free(scores, taken, budget * heads_kv - used)) taken[i] = 1;
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g)
      for (size_t p = 0; p < n; ++p)
        if (taken[(l * kv.kv_heads + g) * n + p]) plan[l][g].push_back(int32_t(p));
  return plan;
}

// KVzap: the surrogate's scores, top of the budget, the recent window (128 by
// default) kept inside it up to half the budget.
Keep ref_kvzap(const KvSnapshot& kv, const WholeStats& s, double ratio) {
  const size_t n = kv.n_pos;
  Keep plan = empty_keep(kv);
  const size_t budget = std::min(kept_per_head(n, ratio), n);
  std::vector<int32_t> forced;
  for (size_t p = n; p-- > n - std::min<size_t>(128, budget / 2);) forced.push_back(int32_t(p));
  for (size_t l = 0; l < kv.layers; ++l)
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const float* h = &s.hidden_scores[(l * kv.kv_heads + g) * n];
      plan[l][g] = select_positions(std::vector<float>(h, h + n), budget, forced);
    }
  return plan;
}

Keep ref_dropper(const std::string& name, const KvSnapshot& kv, const WholeStats& s,
                 const ModelFacts& model, double ratio) {
  if (name == "streaming_llm") return ref_streaming_llm(kv, ratio);
  if (name == "snapkv") return ref_snapkv(kv, s, ratio);
  if (name == "h2o") return ref_h2o(kv, s, ratio);
  if (name == "expected_attention") return ref_expected_attention(kv, s, ratio);
  if (name == "kvzip") return ref_kvzip(kv, s, ratio);
  if (name == "kvzap") return ref_kvzap(kv, s, ratio);
  if (name == "laprox") return ref_laprox(kv, s, model, ratio);
  ADD_FAILURE() << "no reference for " << name;
  return {};
}

/// The whole-request plan of `name` (a dropper, a quantizer, or DROP+QUANT) at `ratio`.
CompressionPlan reference_plan(const std::string& name, const KvSnapshot& kv, const WholeStats& s,
                               const ModelFacts& model, double ratio) {
  const size_t plus = name.find('+');
  const std::string drop = plus == std::string::npos ? name : name.substr(0, plus);
  const std::string quant = plus == std::string::npos ? "" : name.substr(plus + 1);
  const bool quantizer = drop == "kivi" || drop == "kvquant" || drop == "rotate_kv";
  CompressionPlan plan;
  if (quantizer) {  // every position, bits fitted over all of them
    std::vector<int32_t> all(kv.n_pos);
    for (size_t p = 0; p < kv.n_pos; ++p) all[p] = int32_t(p);
    plan.keep.assign(kv.layers, std::vector<std::vector<int32_t>>(kv.kv_heads, all));
    auto q = make_compressor(drop);
    plan.quant = dynamic_cast<const Quantizer&>(*q).plan_rows(
        quant_target(kv.shape(), std::vector<size_t>(kv.layers * kv.kv_heads, kv.n_pos), ratio));
    return plan;
  }
  if (quant.empty()) {
    plan.keep = ref_dropper(drop, kv, s, model, ratio);
    return plan;
  }
  // Composition: drop at ratio^0.5, then fit the kept rows into the whole budget.
  plan.keep = ref_dropper(drop, kv, s, model, std::max(1.0, std::pow(ratio, 0.5)));
  std::vector<size_t> rows;
  for (const auto& layer : plan.keep)
    for (const auto& head : layer) rows.push_back(head.size());
  auto q = make_compressor(quant);
  plan.quant = dynamic_cast<const Quantizer&>(*q).plan_rows(quant_target(kv.shape(), rows, ratio));
  return plan;
}

/// A small random request: KV, the statistics a prefill gathers (window queries,
/// accumulated attention, query moments) and model facts (W_o bf16, RoPE).
struct RandomRequest {
  KvSnapshot kv;
  PrefillStats stats;
  ModelFacts model;
  std::vector<uint16_t> wo;
  uint32_t state;
  float next() {  // uniform in [-1, 1)
    state = state * 1664525u + 1013904223u;
    return 2.0f * float(state >> 8) / float(1u << 24) - 1.0f;
  }
  RandomRequest(size_t layers, size_t kv_heads, size_t heads, size_t d, size_t n, size_t window,
                uint32_t seed)
      : state(seed) {
    kv = KvSnapshot{layers, kv_heads, d, n, {}, {}};
    for (size_t i = 0; i < layers * kv_heads * n * d; ++i) kv.k.push_back(2.0f * next());
    for (size_t i = 0; i < layers * kv_heads * n * d; ++i) kv.v.push_back(next());
    stats = PrefillStats{layers, heads, kv_heads, d, n, window, n - window, {}, {}, false, {}, {}, 0, 0, {}};
    for (size_t i = 0; i < layers * window * heads * d; ++i) stats.window_queries.push_back(next());
    for (size_t i = 0; i < layers * kv_heads * n; ++i)
      stats.accumulated_attention.push_back((next() + 1.0f) * float(n - i % n) / float(n));
    for (size_t i = 0; i < layers * heads * d; ++i) {
      stats.query_mean.push_back(next());
      stats.query_sq_mean.push_back(stats.query_mean.back() * stats.query_mean.back() +
                                    (next() + 1.0f) / 2.0f);
    }
    stats.hidden_outputs = kv_heads;  // the surrogate's scores (KVzap), planted
    for (size_t i = 0; i < layers * kv_heads * n; ++i) stats.hidden_scores.push_back(next());
    model.heads = heads;
    model.layers = layers;
    model.kv_heads = kv_heads;
    model.head_dim = d;
    for (size_t i = 0; i < d / 2; ++i)
      model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(d))));
    for (size_t p = 0; p < n; ++p) model.positions.push_back(int32_t(p));
    const size_t hidden = 24, cols = heads * d;
    for (size_t i = 0; i < layers * hidden * cols; ++i) wo.push_back(f32_to_bf16(next()));
    for (size_t l = 0; l < layers; ++l)
      model.wo.push_back({&wo[l * hidden * cols], DType::bf16, hidden, cols});
  }

  /// Every layer's statistics (all kinds) side by side, from layer_stats.
  [[nodiscard]] WholeStats whole_stats() const {
    WholeStats w{kv.layers, stats.heads, kv.kv_heads, kv.n_pos, stats.window, {}, {}, {}, {}, {}};
    LayerKv layer;
    for (size_t l = 0; l < kv.layers; ++l) {
      kv.read_layer(l, layer);
      const LayerStats s = layer_stats(stats, layer, {true, true, true, true});
      w.hidden_scores.insert(w.hidden_scores.end(), s.hidden_scores.begin(), s.hidden_scores.end());
      w.window_attention.insert(w.window_attention.end(), s.window_attention.begin(),
                                s.window_attention.end());
      w.accumulated_attention.insert(w.accumulated_attention.end(),
                                     s.accumulated_attention.begin(),
                                     s.accumulated_attention.end());
      w.query_mean.insert(w.query_mean.end(), s.query_mean.begin(), s.query_mean.end());
      w.query_sq_mean.insert(w.query_sq_mean.end(), s.query_sq_mean.begin(),
                             s.query_sq_mean.end());
    }
    return w;
  }
  [[nodiscard]] LayerStatsSource stats_for(const Compressor& c) const {
    return [this, needs = c.stats_needs()](const LayerKv& layer) {
      return layer_stats(stats, layer, needs);
    };
  }
};

std::vector<std::string> every_method_and_composition() {
  std::vector<std::string> names = compressor_names();
  for (const char* d :
       {"streaming_llm", "snapkv", "h2o", "expected_attention", "kvzip", "kvzap", "laprox"})
    for (const char* q : {"kivi", "kvquant", "rotate_kv"})
      names.push_back(std::string(d) + "+" + q);
  return names;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(layer_compression, every_method_and_composition_plans_as_the_whole_request_planner_did) {
  for (const auto& [layers, kv_heads, heads, n, window, seed] :
       std::vector<std::tuple<size_t, size_t, size_t, size_t, size_t, uint32_t>>{
           {3, 2, 4, 61, 7, 1}, {2, 1, 3, 40, 40, 2}, {1, 3, 3, 17, 1, 3}}) {
    const RandomRequest rq(layers, kv_heads, heads, 8, n, window, seed);
    const WholeStats whole = rq.whole_stats();
    for (const std::string& name : every_method_and_composition()) {
      auto c = make_compressor(name);
      for (double ratio : {1.0, 2.5, 4.0, 9.0}) {
        const CompressionPlan want = reference_plan(name, rq.kv, whole, rq.model, ratio);
        // Whole layers, one KV head at a time, two at a time.
        for (size_t slice : {size_t(0), size_t(1), size_t(2)}) {
          const CompressionPlan got =
              plan_snapshot(*c, rq.kv, rq.stats_for(*c), rq.model, ratio, slice);
          const std::string where = name + " at " + std::to_string(ratio) + "x, case " +
                                    std::to_string(seed) + ", slices of " +
                                    std::to_string(slice) + " KV heads";
          EXPECT_EQ(got.keep, want.keep) << where;
          EXPECT_EQ(got.quant.key_bits, want.quant.key_bits) << where;
          EXPECT_EQ(got.quant.value_bits, want.quant.value_bits) << where;
        }
      }
    }
  }
}

TEST(layer_compression, the_view_built_slice_by_slice_equals_the_view_built_from_the_whole_snapshot) {
  const RandomRequest rq(3, 3, 6, 16, 45, 6, 7);
  const WholeStats whole = rq.whole_stats();
  for (const std::string& name : every_method_and_composition())
   for (size_t slice : {size_t(0), size_t(1), size_t(2)}) {
    auto c = make_compressor(name);
    const double ratio = 4.0;
    size_t reads = 0, most_heads = 0;
    auto read = [&](size_t l, size_t g0, size_t count, LayerKv& out) {
      ++reads;
      most_heads = std::max(most_heads, count);
      rq.kv.read_heads(l, g0, count, out);
    };
    const LayerCompression got =
        compress_by_layer(*c, rq.kv.shape(), read, rq.stats_for(*c), rq.model, ratio, slice);
    // One pass, or two for model-wide selection and drop+quantize compositions;
    // 3 KV heads in slices of 2 are two reads per layer and pass.
    const bool two = c->selects_globally() || (c->quantizes() && !c->keeps_every_position());
    const size_t per_layer = slice == 0 ? 1 : (3 + slice - 1) / slice;
    EXPECT_EQ(reads, (two ? 2 : 1) * rq.kv.layers * per_layer) << name;
    EXPECT_EQ(most_heads, slice == 0 ? 3 : slice) << name;
    EXPECT_TRUE(got.view.complete()) << name;
    // The reference plan through the whole-snapshot build (the codec records its
    // settings again first: plan_quant is where they are chosen).
    const CompressionPlan want = reference_plan(name, rq.kv, whole, rq.model, ratio);
    (void)plan_snapshot(*c, rq.kv, rq.stats_for(*c), rq.model, ratio);
    const CompressedView ref = CompressedView::build(rq.kv, want, *c, rq.model);
    EXPECT_EQ(got.view.stored_bytes(), ref.stored_bytes()) << name;
    EXPECT_EQ(got.view.held_bytes(), ref.held_bytes()) << name;
    for (size_t l = 0; l < rq.kv.layers; ++l)
      for (size_t g = 0; g < rq.kv.kv_heads; ++g) {
        ASSERT_EQ(got.view.count(l, g), ref.count(l, g)) << name;
        const size_t m = ref.count(l, g) * rq.kv.head_dim;
        std::vector<float> k1(m), v1(m), k2(m), v2(m);
        got.view.decode(l, g, k1.data(), v1.data());
        ref.decode(l, g, k2.data(), v2.data());
        EXPECT_TRUE(same_bits(k1, k2) && same_bits(v1, v2))
            << name << " layer " << l << " head " << g << ", slices of " << slice;
      }
   }
}

TEST(layer_compression, slices_hold_half_the_kv_heads_of_bf16_kv_and_all_of_f32_kv) {
  // fp32 slices of about one layer's KV as stored: half the heads for 2-byte KV.
  EXPECT_EQ(slice_heads_for(8, 2), 4u);
  EXPECT_EQ(slice_heads_for(2, 2), 1u);
  EXPECT_EQ(slice_heads_for(1, 2), 1u);  // never an empty slice
  EXPECT_EQ(slice_heads_for(8, 4), 8u);
}

TEST(layer_stats, the_statistics_of_a_slice_of_kv_heads_are_that_part_of_the_whole_layers) {
  const RandomRequest rq(2, 3, 6, 8, 20, 5, 13);
  const StatsNeeds all{.window = true, .accumulated = true, .query_moments = true};
  LayerKv layer, slice;
  for (size_t l = 0; l < 2; ++l) {
    rq.kv.read_layer(l, layer);
    const LayerStats whole = layer_stats(rq.stats, layer, all);
    for (size_t g0 = 0; g0 < 3; ++g0) {
      rq.kv.read_heads(l, g0, 1, slice);
      const LayerStats s = layer_stats(rq.stats, slice, all);
      ASSERT_EQ(s.kv_heads, 1u);
      ASSERT_EQ(s.heads, 2u);
      const size_t n = 20, W = 5, hd = 2 * 8;
      EXPECT_TRUE(std::equal(s.window_attention.begin(), s.window_attention.end(),
                             whole.window_attention.begin() + long(g0 * W * n)));
      EXPECT_TRUE(std::equal(s.accumulated_attention.begin(), s.accumulated_attention.end(),
                             whole.accumulated_attention.begin() + long(g0 * n)));
      EXPECT_TRUE(std::equal(s.query_mean.begin(), s.query_mean.end(),
                             whole.query_mean.begin() + long(g0 * hd)));
      EXPECT_TRUE(std::equal(s.query_sq_mean.begin(), s.query_sq_mean.end(),
                             whole.query_sq_mean.begin() + long(g0 * hd)));
      EXPECT_EQ(s.window_attention.size(), W * n);
    }
  }
}

TEST(layer_stats, window_attention_is_the_exact_causal_softmax_of_the_window_queries) {
  const RandomRequest rq(2, 2, 4, 8, 20, 5, 11);
  LayerKv layer;
  rq.kv.read_layer(1, layer);
  const LayerStats s = layer_stats(rq.stats, layer, {.window = true});
  ASSERT_EQ(s.window, 5u);
  EXPECT_TRUE(s.accumulated_attention.empty());
  EXPECT_TRUE(s.query_mean.empty());
  const size_t group = 2;
  for (size_t g = 0; g < 2; ++g)
    for (size_t w = 0; w < 5; ++w) {
      const size_t pos = 15 + w;
      std::vector<double> want(20, 0.0);
      for (size_t j = 0; j < group; ++j) {
        const float* q = rq.stats.window_query(1, w, g * group + j);
        std::vector<double> e(pos + 1);
        double total = 0;
        for (size_t t = 0; t <= pos; ++t) {
          double dot = 0;
          for (size_t d = 0; d < 8; ++d) dot += double(q[d]) * double(layer.k_at(g, t)[d]);
          total += e[t] = std::exp(dot / std::sqrt(8.0));
        }
        for (size_t t = 0; t <= pos; ++t) want[t] += e[t] / total;
      }
      for (size_t t = 0; t < 20; ++t)
        EXPECT_NEAR(s.window_row(g, w)[t], want[t], 1e-5 + 1e-4 * want[t]) << g << " " << w << " " << t;
    }
}

TEST(layer_stats, rows_past_the_compressed_range_are_normalised_over_it_and_sum_to_the_accumulated_attention) {
  RandomRequest rq(1, 1, 2, 8, 12, 3, 5);
  rq.stats.window_start = 12;  // a verify pass's rows at 12, 13, 14: past [0, 12)
  rq.stats.accumulated_attention.clear();
  rq.stats.accumulated_from_window = true;
  LayerKv layer;
  rq.kv.read_layer(0, layer);
  const LayerStats s = layer_stats(rq.stats, layer, {.window = true, .accumulated = true});
  std::vector<float> sum(12, 0.0f);
  for (size_t w = 0; w < 3; ++w) {
    double total = 0;
    for (size_t t = 0; t < 12; ++t) {
      total += s.window_row(0, w)[t];
      sum[t] += s.window_row(0, w)[t];
    }
    EXPECT_NEAR(total, 2.0, 1e-5);  // two query heads, each normalised over [0, 12)
  }
  for (size_t t = 0; t < 12; ++t) EXPECT_FLOAT_EQ(s.accumulated(0)[t], sum[t]);
}

TEST(layer_stats, statistics_that_were_not_gathered_are_an_error_naming_them) {
  RandomRequest rq(1, 1, 2, 8, 12, 3, 5);
  rq.stats.query_mean.clear();
  LayerKv layer;
  rq.kv.read_layer(0, layer);
  try {
    (void)layer_stats(rq.stats, layer, {.query_moments = true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("query_mean"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc

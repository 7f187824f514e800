// LaProx-style token dropping.
// Paper: arXiv 2605.07234, which casts KV eviction as an output-aware, layer-wise
// approximation of the attention output matrix product, with tokens selected
// model-wide rather than with a fixed count per head.
// Score of position p in layer l, KV head g (group G_g of query heads, |G_g| = m):
//   a(p)   = attention paid to p by the observation window (PrefillStats rows of
//            window_attention, averaged over the rows; already summed over G_g)
//   c(p)   = Σ_{h in G_g} a_h(p) · ‖W_o[:, cols of h] · v_p‖₂, with a_h = a / m
//            (the statistics hold only the group's sum, so it is split evenly),
//            i.e. a(p) × the mean over h of ‖W_o,h v_p‖: the size of p's term in the
//            layer's output o = Σ_h W_o,h Σ_p a_h(p) v_p.
//   ‖W_o,h v‖² = vᵀ (W_o,hᵀ W_o,h) v, through each head's d×d Gram matrix.
// Each KV head is scored alone, from its own KV (plan_layer, any slice of a layer);
// select_globally divides a layer's scores by their total (double sum of the float
// contributions, in head and position order) so layers compare, then keeps them
// GLOBALLY: model budget = kept_per_head(n_pos, ratio) × layers × kv_heads positions.
// Per head, the first `sinks` and last `recent` positions are always kept, and at
// least `min_per_head` (these forced positions capped at the per-head budget, sinks
// first); the rest of the model budget goes to the top scores over all (l, g, p).
// Heads therefore keep different counts; the total is exactly the model budget.
// By threshold (TokenSelection): per head, the sinks, the recent positions and
// every position whose layer-normalised score is >= the threshold.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"

namespace vc {
namespace {

size_t count_param(const std::string& name, double value) {
  if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > 1e9) {
    throw Error("laprox: parameter '" + name + "' must be an integer >= 0, got " +
                std::to_string(value));
  }
  return size_t(value);
}

/// Top `count` of `scores` over the positions not marked in `taken` (ties: lower
/// index), as indices into `scores`.
std::vector<size_t> top_free(const std::vector<float>& scores, const std::vector<char>& taken,
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

/// LaProx: output-aware contributions, selected model-wide.
class LaProx final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "laprox"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the tokens with the largest output contribution a(p)·|W_o v_p|, "
           "selected model-wide (LaProx, arXiv 2605.07234)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"sinks", double(sinks_), "first positions always kept per head"},
            {"recent", double(recent_), "most recent positions always kept per head"},
            {"min_per_head", double(min_per_head_), "fewest positions any head keeps"}};
  }
  void set_param(const std::string& name, double value) override {
    if (name == "sinks") {
      sinks_ = count_param(name, value);
    } else if (name == "recent") {
      recent_ = count_param(name, value);
    } else if (name == "min_per_head") {
      min_per_head_ = count_param(name, value);
    } else {
      throw Error("laprox: unknown parameter '" + name + "' (known: sinks, recent, min_per_head)");
    }
  }
  [[nodiscard]] StatsNeeds stats_needs() const override { return {.window = true}; }
  [[nodiscard]] bool selects_globally() const override { return true; }

  /// The output contributions of the slice's KV heads, [kv_heads][n_pos].
  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    check(in);
    LayerPlan plan;
    plan.scores = contributions(in);
    return plan;
  }

  void select_globally(std::vector<LayerPlan>& layers, const KvShape& shape,
                       double ratio) const override {
    const size_t n = shape.n_pos, heads_kv = shape.layers * shape.kv_heads;
    if (layers.size() != shape.layers) throw Error("laprox: scores of every layer are needed");
    for (LayerPlan& p : layers) p.keep.assign(shape.kv_heads, {});
    if (n == 0 || heads_kv == 0) return;
    // [layers][kv_heads][n_pos], the per-layer scores side by side.
    std::vector<float> scores;
    scores.reserve(heads_kv * n);
    for (const LayerPlan& p : layers) {
      if (p.scores.size() != shape.kv_heads * n) throw Error("laprox: a layer's scores have the wrong size");
      double total = 0;  // normalised per layer, so that layers compare
      for (float x : p.scores) total += double(x);
      for (float x : p.scores) scores.push_back(total > 0 ? float(double(x) / total) : x);
    }

    if (selection().by_threshold) {  // per head: sinks, recent, scores >= tau (normalised)
      const TokenSelection& sel = selection();
      std::vector<float> head(n);
      std::vector<int32_t> forced;
      for (size_t p = 0; p < std::min(sinks_, n); ++p) forced.push_back(int32_t(p));
      for (size_t p = n; p-- > n - std::min(recent_, n);) forced.push_back(int32_t(p));
      for (size_t l = 0; l < shape.layers; ++l) {
        for (size_t g = 0; g < shape.kv_heads; ++g) {
          std::copy_n(scores.begin() + long((l * shape.kv_heads + g) * n), n, head.begin());
          layers[l].keep[g] = select_by_threshold(head, sel.threshold, sel.recent, forced);
        }
        layers[l].scores.clear();
      }
      return;
    }
    // Forced positions per head: sinks, recent window, then the min_per_head floor.
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
      for (size_t p = 0; p < std::min(sinks_, n); ++p) force(p);
      for (size_t p = n; p-- > n - std::min(recent_, n);) force(p);
      const size_t floor = std::min(min_per_head_, budget);
      if (count < floor) {
        std::copy_n(scores.begin() + long(hg * n), n, head_scores.begin());
        for (size_t p : top_free(head_scores, head_taken, floor - count)) force(p);
      }
      for (size_t p = 0; p < n; ++p) taken[hg * n + p] = head_taken[p];
      used += count;
    }
    // The rest of the model-wide budget: top scores over every (layer, head, position).
    for (size_t i : top_free(scores, taken, budget * heads_kv - used)) taken[i] = 1;
    for (size_t l = 0; l < shape.layers; ++l) {
      for (size_t g = 0; g < shape.kv_heads; ++g) {
        const size_t base = (l * shape.kv_heads + g) * n;
        for (size_t p = 0; p < n; ++p) {
          if (taken[base + p]) layers[l].keep[g].push_back(int32_t(p));
        }
      }
      layers[l].scores.clear();
    }
  }

 private:
  static void check(const LayerInput& in) {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    if (s == nullptr) throw Error("laprox: needs PrefillStats (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos) {
      throw Error("laprox: PrefillStats shape (kv_heads, n_pos) does not match the KV");
    }
    if (s->window_attention.size() != kv.kv_heads * s->window * kv.n_pos) {
      throw Error("laprox: PrefillStats.window_attention has the wrong size");
    }
    if (kv.n_pos > 0 && s->window == 0) throw Error("laprox: PrefillStats has no window rows");
    const size_t cells = kv.kv_heads * kv.n_pos * kv.head_dim;
    if (kv.k.size() != cells || kv.v.size() != cells) {
      throw Error("laprox: LayerKv k/v sizes do not match its shape");
    }
    const ModelFacts& m = in.model;
    if (m.wo.empty()) throw Error("laprox: needs the output projections (ModelFacts.wo is empty)");
    if (m.wo.size() != in.layers || kv.layer >= m.wo.size()) {
      throw Error("laprox: ModelFacts.wo must have one matrix per layer");
    }
    if (s->kv_heads == 0 || s->heads % s->kv_heads != 0 ||
        (kv.first_head + kv.kv_heads) * (s->heads / s->kv_heads) > m.heads) {
      throw Error("laprox: the statistics' query heads must be a positive multiple of their KV "
                  "heads, and the slice's query heads among ModelFacts.heads");
    }
    const ModelFacts::Matrix& w = m.wo[kv.layer];
    if (w.data == nullptr || w.rows == 0 || w.cols != m.heads * kv.head_dim) {
      throw Error("laprox: ModelFacts.wo[" + std::to_string(kv.layer) +
                  "] must be [hidden, heads * head_dim] with data");
    }
  }

  /// Output contributions of the slice's KV heads, [kv_heads][n_pos] (not normalised).
  static std::vector<float> contributions(const LayerInput& in) {
    const LayerKv& kv = in.kv;
    const LayerStats& s = *in.stats;
    const size_t n = kv.n_pos, d = kv.head_dim;
    const size_t group = s.heads / s.kv_heads;  // query heads per KV head
    // The slice's query heads [h0, h1).
    const size_t h0 = kv.first_head * group, h1 = (kv.first_head + kv.kv_heads) * group;
    std::vector<float> out(kv.kv_heads * n, 0.0f);
    std::vector<float> row, gram((h1 - h0) * d * d);
    std::vector<double> attn(n);
    // Gram matrix W_o,hᵀ W_o,h of each query head's column block.
    const ModelFacts::Matrix& w = in.model.wo[kv.layer];
    row.resize(w.cols);
    const auto* bytes = static_cast<const unsigned char*>(w.data);
    for (size_t r = 0; r < w.rows; ++r) {
      to_f32(w.dtype, bytes + r * w.cols * dtype_size(w.dtype), row.data(), w.cols);
      for (size_t h = h0; h < h1; ++h) {
        const float* x = &row[h * d];
        float* m = &gram[(h - h0) * d * d];
        for (size_t i = 0; i < d; ++i) {
          const float xi = x[i];
          for (size_t j = 0; j < d; ++j) m[i * d + j] += xi * x[j];
        }
      }
    }
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(attn.begin(), attn.end(), 0.0);
      for (size_t r = 0; r < s.window; ++r) {
        const float* a = s.window_row(g, r);
        for (size_t p = 0; p < n; ++p) attn[p] += double(a[p]) / double(s.window);
      }
      float* c = &out[g * n];
      const size_t first = (kv.first_head + g) * group;
      for (size_t p = 0; p < n; ++p) {
        const float* v = kv.v_at(g, p);
        double norms = 0;
        for (size_t h = first; h < first + group; ++h) {
          const float* m = &gram[(h - h0) * d * d];
          double q = 0;
          for (size_t i = 0; i < d; ++i) {
            double mv = 0;
            for (size_t j = 0; j < d; ++j) mv += double(m[i * d + j]) * double(v[j]);
            q += double(v[i]) * mv;
          }
          norms += std::sqrt(std::max(0.0, q));
        }
        c[p] = float(attn[p] * norms / double(group));
      }
    }
    return out;
  }

  size_t sinks_ = 4;
  size_t recent_ = 8;
  size_t min_per_head_ = 1;
};

}  // namespace

std::unique_ptr<Compressor> make_laprox() { return std::make_unique<LaProx>(); }

}  // namespace vc

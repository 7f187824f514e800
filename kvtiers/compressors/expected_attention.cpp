// ExpectedAttention token dropping.
// Paper: A. Devoto, M. Jeblick, S. Jégou, "Expected Attention: KV cache compression
// by estimating attention from future queries distribution", arXiv 2510.00636
// (reference implementation: NVIDIA kvpress, ExpectedAttentionPress).
// Future queries of query head h are modelled as a Gaussian with the prompt's
// post-RoPE query statistics (PrefillStats::query_mean, variance = query_sq_mean -
// query_mean², diagonal covariance). Under that model the expected unnormalised
// attention to key k is E[exp(q·k/√d)] = exp(μ·k/√d + ½ kᵀΣk/d). As kvpress does, it
// is normalised over the (non-sink) positions per query head (a softmax), averaged
// over the query heads of the KV head's group, and multiplied by ‖v‖. Kept per
// (layer, KV head): the first `sinks` positions and the top scores, for a total of
// kept_per_head(n_pos, ratio). (kvpress also averages the RoPE rotation over future
// positions; we use the prompt's post-RoPE statistics as given.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"

namespace vc {
namespace {

/// ExpectedAttention: attention expected from a Gaussian model of future queries.
class ExpectedAttention final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "expected_attention"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep sinks and the keys with the largest attention expected from a Gaussian "
           "model of future queries, times |v| (Expected Attention, Devoto et al., "
           "arXiv 2510.00636)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"sinks", double(sinks_), "first positions always kept (attention sinks)"}};
  }
  void set_param(const std::string& name, double value) override {
    if (name != "sinks") {
      throw Error("expected_attention: unknown parameter '" + name + "' (known: sinks)");
    }
    if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > 1e9) {
      throw Error("expected_attention: parameter 'sinks' must be an integer >= 0, got " +
                  std::to_string(value));
    }
    sinks_ = size_t(value);
  }
  [[nodiscard]] StatsNeeds stats_needs() const override { return {.query_moments = true}; }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    check(kv, s);
    const size_t n = kv.n_pos, d = kv.head_dim;
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, {});
    if (n == 0) return plan;
    const size_t budget = std::min(kept_per_head(n, in.ratio), n);
    const size_t group = s->heads / kv.kv_heads;
    const size_t sinks = std::min(sinks_, n);
    std::vector<int32_t> forced;
    for (size_t p = 0; p < sinks; ++p) forced.push_back(int32_t(p));
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    std::vector<double> logits(n), mean(n);
    std::vector<float> scores(n);
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(mean.begin(), mean.end(), 0.0);
      for (size_t j = 0; j < group; ++j) {
        const size_t h = g * group + j;
        const float* mu = &s->query_mean[h * d];
        const float* sq = &s->query_sq_mean[h * d];
        double top = -std::numeric_limits<double>::infinity();
        for (size_t p = sinks; p < n; ++p) {
          const float* k = kv.k_at(g, p);
          double lin = 0, quad = 0;
          for (size_t i = 0; i < d; ++i) {
            const double var = std::max(0.0, double(sq[i]) - double(mu[i]) * double(mu[i]));
            lin += double(mu[i]) * double(k[i]);
            quad += var * double(k[i]) * double(k[i]);
          }
          logits[p] = lin * inv_sqrt_d + 0.5 * quad / double(d);
          top = std::max(top, logits[p]);
        }
        double total = 0;  // softmax over the non-sink positions, per query head
        for (size_t p = sinks; p < n; ++p) total += (logits[p] = std::exp(logits[p] - top));
        for (size_t p = sinks; p < n; ++p) mean[p] += logits[p] / total / double(group);
      }
      for (size_t p = sinks; p < n; ++p) {
        const float* v = kv.v_at(g, p);
        double norm = 0;
        for (size_t i = 0; i < d; ++i) norm += double(v[i]) * double(v[i]);
        scores[p] = float(mean[p] * std::sqrt(norm));
      }
      plan.keep[g] = select_kept(scores, budget, forced);
    }
    return plan;
  }

 private:
  static void check(const LayerKv& kv, const LayerStats* s) {
    if (s == nullptr) throw Error("expected_attention: needs PrefillStats (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos || s->head_dim != kv.head_dim) {
      throw Error("expected_attention: PrefillStats shape (kv_heads, n_pos, head_dim) "
                  "does not match the KV");
    }
    const size_t cells = kv.kv_heads * kv.n_pos * kv.head_dim;
    if (kv.k.size() != cells || kv.v.size() != cells) {
      throw Error("expected_attention: LayerKv k/v sizes do not match its shape");
    }
    if (kv.kv_heads == 0 || s->heads == 0 || s->heads % kv.kv_heads != 0) {
      throw Error("expected_attention: PrefillStats.heads must be a positive multiple of kv_heads");
    }
    const size_t q = s->heads * kv.head_dim;
    if (s->query_mean.size() != q || s->query_sq_mean.size() != q) {
      throw Error("expected_attention: PrefillStats.query_mean/query_sq_mean have the wrong size");
    }
  }

  size_t sinks_ = 4;
};

}  // namespace

std::unique_ptr<Compressor> make_expected_attention() {
  return std::make_unique<ExpectedAttention>();
}

}  // namespace vc

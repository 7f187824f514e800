// H2O token dropping.
// Paper: Z. Zhang, Y. Sheng, T. Zhou, T. Chen, L. Zheng, R. Cai, Z. Song, Y. Tian,
// C. Ré, C. Barrett, Z. Wang, B. Chen, "H2O: Heavy-Hitter Oracle for Efficient
// Generative Inference of Large Language Models", arXiv 2306.14048.
// Per (layer, KV head), of the budget kept_per_head(n_pos, ratio) a share
// `recent_fraction` goes to the most recent positions and the rest to the "heavy
// hitters": the positions with the largest attention accumulated over every prompt
// query (PrefillStats::accumulated_attention, summed over the group's query heads).
// This is the one-shot (prefill) form of H2O's greedy eviction.
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

/// H2O: recent window + heavy hitters by accumulated attention.
class H2o final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "h2o"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the most recent tokens and the heavy hitters by accumulated attention "
           "(H2O, Zhang et al., arXiv 2306.14048)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"recent_fraction", recent_fraction_,
             "share of the budget given to the most recent positions, in [0, 1]"}};
  }
  void set_param(const std::string& name, double value) override {
    if (name != "recent_fraction") {
      throw Error("h2o: unknown parameter '" + name + "' (known: recent_fraction)");
    }
    if (!(value >= 0.0 && value <= 1.0)) {
      throw Error("h2o: parameter 'recent_fraction' must be in [0, 1], got " +
                  std::to_string(value));
    }
    recent_fraction_ = value;
  }
  [[nodiscard]] StatsNeeds stats_needs() const override { return {.accumulated = true}; }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    if (s == nullptr) throw Error("h2o: needs PrefillStats (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos) {
      throw Error("h2o: PrefillStats shape (kv_heads, n_pos) does not match the KV");
    }
    if (s->accumulated_attention.size() != kv.kv_heads * kv.n_pos) {
      throw Error("h2o: PrefillStats.accumulated_attention has the wrong size");
    }
    const size_t n = kv.n_pos;
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, {});
    if (n == 0) return plan;
    const size_t budget = std::min(kept_per_head(n, in.ratio), n);
    const size_t recent = std::min(budget, size_t(std::lround(recent_fraction_ * double(budget))));
    std::vector<int32_t> forced;
    for (size_t p = n; p-- > n - recent;) forced.push_back(int32_t(p));
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const float* acc = s->accumulated(g);
      plan.keep[g] = select_kept(std::vector<float>(acc, acc + n), budget, forced);
    }
    return plan;
  }

 private:
  double recent_fraction_ = 0.5;
};

}  // namespace

std::unique_ptr<Compressor> make_h2o() { return std::make_unique<H2o>(); }

}  // namespace vc

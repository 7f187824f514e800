// SnapKV token dropping.
// Paper: Y. Li, Y. Huang, B. Yang, B. Venkitesh, A. Locatelli, H. Ye, T. Cai,
// P. Lewis, D. Chen, "SnapKV: LLM Knows What You are Looking for Before Generation",
// arXiv 2404.14469.
// The last `window` prompt queries (the observation window) vote for the prefix
// positions they attend to: per (layer, KV head), the window rows of
// PrefillStats::window_attention (already summed over the group's query heads) are
// summed over the rows, max-pooled along positions with `kernel` so that the
// neighbours of a selected token survive with it (clustering), and the top-scored
// prefix positions are kept together with the observation window itself, for a total
// of kept_per_head(n_pos, ratio) per head. When the budget is smaller than the window,
// only the most recent window positions are kept.
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

size_t count_param(const std::string& name, double value, double lo) {
  if (!std::isfinite(value) || value < lo || value != std::floor(value) || value > 1e9) {
    throw Error("snapkv: parameter '" + name + "' must be an integer >= " +
                std::to_string(int(lo)) + ", got " + std::to_string(value));
  }
  return size_t(value);
}

/// SnapKV: observation-window voting with max-pooling.
class SnapKv final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "snapkv"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the observation window and the positions it attends to most, "
           "max-pooled (SnapKV, Li et al., arXiv 2404.14469)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"window", double(window_), "observation window: last prompt queries that vote"},
            {"kernel", double(kernel_), "max-pooling width along positions (odd; 1 = none)"}};
  }
  void set_param(const std::string& name, double value) override {
    if (name == "window") {
      window_ = count_param(name, value, 1);
    } else if (name == "kernel") {
      const size_t k = count_param(name, value, 1);
      if (k % 2 == 0) {
        throw Error("snapkv: parameter 'kernel' must be odd, got " + std::to_string(k));
      }
      kernel_ = k;
    } else {
      throw Error("snapkv: unknown parameter '" + name + "' (known: window, kernel)");
    }
  }
  [[nodiscard]] StatsNeeds stats_needs() const override { return {.window = true}; }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    if (s == nullptr) throw Error("snapkv: needs PrefillStats (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos) {
      throw Error("snapkv: PrefillStats shape (kv_heads, n_pos) does not match the KV");
    }
    if (s->window_attention.size() != kv.kv_heads * s->window * kv.n_pos) {
      throw Error("snapkv: PrefillStats.window_attention has the wrong size");
    }
    const size_t n = kv.n_pos;
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, {});
    if (n == 0) return plan;
    if (s->window == 0) throw Error("snapkv: PrefillStats has no observation window rows");
    const size_t w = std::min({s->window, window_, n});
    const size_t prefix = n - w;
    const size_t budget = std::min(kept_per_head(n, in.ratio), n);
    std::vector<int32_t> forced;  // the observation window, most recent first
    for (size_t p = n; p-- > prefix;) forced.push_back(int32_t(p));
    const size_t half = kernel_ / 2;
    std::vector<float> votes(n), pooled(n);
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      std::fill(votes.begin(), votes.end(), 0.0f);
      for (size_t r = s->window - w; r < s->window; ++r) {
        const float* row = s->window_row(g, r);
        for (size_t p = 0; p < prefix; ++p) votes[p] += row[p];
      }
      std::fill(pooled.begin(), pooled.end(), std::numeric_limits<float>::lowest());
      for (size_t p = 0; p < prefix; ++p) {
        const size_t lo = p >= half ? p - half : 0, hi = std::min(prefix, p + half + 1);
        pooled[p] = *std::max_element(votes.begin() + long(lo), votes.begin() + long(hi));
      }
      plan.keep[g] = select_kept(pooled, budget, forced);
    }
    return plan;
  }

 private:
  size_t window_ = 32;
  size_t kernel_ = 7;
};

}  // namespace

std::unique_ptr<Compressor> make_snapkv() { return std::make_unique<SnapKv>(); }

}  // namespace vc

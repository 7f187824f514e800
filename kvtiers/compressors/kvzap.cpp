// KVzap token dropping.
// Paper: A. Jegou, M. Jeblick et al. (NVIDIA), "KVzap: Fast, Adaptive, and Faithful
// KV Cache Pruning", arXiv 2601.07891; kvpress's KVzapPress.
// A small per-layer surrogate (kvtiers/kvzap/surrogate.hpp: linear, or a two-layer
// MLP) maps each token's input hidden state of the layer to one score per KV head:
// its prediction of the log of a KVzip-style importance (fitted by
// `vericache calibrate kvzap` to this runtime's own KVzip scores, see
// runtime/kvzap_calibration.hpp). The prefill and verify passes run the surrogate on
// every row as it is computed (StatsNeeds::hidden), so scoring costs one small
// matrix product per row and layer, and needs no attention statistics.
// Selection: by threshold (kvpress pairs KVzap with its ThresholdPress): every
// position whose predicted score is >= TAU, plus the `keep_recent` most recent
// positions (128 by default); or by ratio: the top kept_per_head(n, ratio)
// positions per head, of which the most recent min(keep_recent, budget / 2) are
// always kept. The surrogate comes from `kvzap.safetensors` beside the model
// (runtime/kvzap_file.hpp loads it and hands it over with set_surrogate).
#include <algorithm>
#include <memory>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/kvzap/surrogate.hpp"

namespace vc {
namespace {

class KvZap final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "kvzap"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the positions a per-layer surrogate of the hidden states scores highest, "
           "predicting KVzip-style importance (KVzap, arXiv 2601.07891; needs "
           "kvzap.safetensors beside the model: vericache calibrate kvzap)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override { return {}; }
  void set_param(const std::string& name, double /*value*/) override {
    throw Error("kvzap: unknown parameter '" + name +
                "' (kvzap has no parameters; its recent window is the setting keep_recent)");
  }
  [[nodiscard]] StatsNeeds stats_needs() const override { return {.hidden = true}; }
  [[nodiscard]] const HiddenScorer* hidden_scorer() const override { return surrogate_.get(); }
  [[nodiscard]] std::string_view model_file() const override { return "kvzap.safetensors"; }
  void set_surrogate(std::shared_ptr<const KvzapSurrogate> s) override {
    if (s) s->validate();
    surrogate_ = std::move(s);
  }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    if (s == nullptr) throw Error("kvzap: needs the surrogate's scores (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos ||
        s->hidden_scores.size() != kv.kv_heads * kv.n_pos)
      throw Error("kvzap: the surrogate's scores do not match the KV (kv_heads, n_pos)");
    const size_t n = kv.n_pos;
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, {});
    if (n == 0) return plan;
    const size_t budget = std::min(kept_per_head(n, in.ratio), n);
    // Ratio selection keeps the recent window inside the budget (at most half of it);
    // threshold selection adds the whole window itself (select_by_threshold).
    std::vector<int32_t> forced;
    if (!selection().by_threshold) {
      const size_t recent = std::min(selection().recent, budget / 2);
      for (size_t p = n; p-- > n - recent;) forced.push_back(int32_t(p));
    }
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const float* h = s->hidden(g);
      plan.keep[g] = select_kept(std::vector<float>(h, h + n), budget, forced);
    }
    return plan;
  }

 private:
  std::shared_ptr<const KvzapSurrogate> surrogate_;
};

}  // namespace

std::unique_ptr<Compressor> make_kvzap() { return std::make_unique<KvZap>(); }

}  // namespace vc

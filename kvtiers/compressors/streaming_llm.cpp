// StreamingLLM token dropping.
// Paper: G. Xiao, Y. Tian, B. Chen, S. Han, M. Lewis, "Efficient Streaming Language
// Models with Attention Sinks", arXiv 2309.17453.
// Keeps, per (layer, KV head), the first `sinks` positions (the attention sinks) and
// the most recent positions filling the rest of the budget kept_per_head(n_pos, ratio).
// Needs no prefill statistics; every head keeps the same positions.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"

namespace vc {
namespace {

/// StreamingLLM: attention sinks + recent window.
class StreamingLlm final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "streaming_llm"; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the first `sinks` tokens and the most recent ones (StreamingLLM, "
           "Xiao et al., arXiv 2309.17453)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override {
    return {{"sinks", double(sinks_), "first positions always kept (attention sinks)"}};
  }
  void set_param(const std::string& name, double value) override {
    if (name != "sinks") {
      throw Error("streaming_llm: unknown parameter '" + name + "' (known: sinks)");
    }
    if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > 1e9) {
      throw Error("streaming_llm: parameter 'sinks' must be an integer >= 0, got " +
                  std::to_string(value));
    }
    sinks_ = size_t(value);
  }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const size_t n = kv.n_pos;
    std::vector<int32_t> keep;
    if (n > 0) {
      const size_t budget = std::min(kept_per_head(n, in.ratio), n);
      const size_t sinks = std::min(sinks_, budget);
      for (size_t p = 0; p < sinks; ++p) keep.push_back(int32_t(p));
      for (size_t p = n - (budget - sinks); p < n; ++p) keep.push_back(int32_t(p));
    }
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, keep);
    return plan;
  }

 private:
  size_t sinks_ = 4;
};

}  // namespace

std::unique_ptr<Compressor> make_streaming_llm() { return std::make_unique<StreamingLlm>(); }

}  // namespace vc

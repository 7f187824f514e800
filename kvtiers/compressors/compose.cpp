// Drop + quantize composition: a token-dropping method chooses the positions and a
// quantizer stores what is kept. The target ratio is split between them: the
// dropper plans at r_drop = ratio^drop_share (sqrt by default), and the quantizer
// then fits the rows the dropper kept into the whole budget, full bf16 bytes of
// every position / ratio (QuantTarget, up to kRatioSlack) -- i.e. it quantizes at
// r_quant = ratio * kept / n_pos, ~ratio / r_drop -- choosing its bits and
// overheads from the kept counts, so the composition as a whole meets the ratio.
// E.g. "snapkv+kivi" at 8x keeps ~1/2.83 of the tokens at 4 bits.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

class Composition final : public Compressor {
 public:
  Composition(std::unique_ptr<Compressor> dropper, std::unique_ptr<Compressor> quantizer)
      : dropper_(std::move(dropper)), quantizer_(std::move(quantizer)) {
    name_ = std::string(dropper_->name()) + "+" + std::string(quantizer_->name());
    summary_ = "Drops tokens with " + std::string(dropper_->name()) + ", then quantizes the kept rows with " +
               std::string(quantizer_->name()) + "; ratio split by drop_share";
  }

  [[nodiscard]] std::string_view name() const override { return name_; }
  [[nodiscard]] std::string_view summary() const override { return summary_; }

  [[nodiscard]] std::vector<CompressorParam> params() const override {
    std::vector<CompressorParam> out = {
        {"drop_share", share_, "share of the ratio (as an exponent) given to dropping: r_drop = ratio^share"}};
    for (const Compressor* c : {dropper_.get(), quantizer_.get()}) {
      for (CompressorParam p : c->params()) {
        p.name = std::string(c->name()) + "." + p.name;
        out.push_back(std::move(p));
      }
    }
    return out;
  }

  void set_param(const std::string& name, double value) override {
    if (name == "drop_share") {
      if (!(value >= 0.0 && value <= 1.0)) {
        throw Error(name_ + ": parameter 'drop_share' must be in [0, 1], got " + std::to_string(value));
      }
      share_ = value;
      return;
    }
    for (Compressor* c : {dropper_.get(), quantizer_.get()}) {
      const std::string prefix = std::string(c->name()) + ".";
      if (name.rfind(prefix, 0) == 0) {
        c->set_param(name.substr(prefix.size()), value);
        return;
      }
    }
    throw Error(name_ + ": unknown parameter '" + name + "' (known: drop_share, " +
                std::string(dropper_->name()) + ".*, " + std::string(quantizer_->name()) + ".*)");
  }

  [[nodiscard]] StatsNeeds stats_needs() const override { return dropper_->stats_needs(); }
  [[nodiscard]] bool scores_tokens() const override { return dropper_->scores_tokens(); }
  [[nodiscard]] const HiddenScorer* hidden_scorer() const override {
    return dropper_->hidden_scorer();
  }
  [[nodiscard]] std::string_view model_file() const override { return dropper_->model_file(); }
  void set_surrogate(std::shared_ptr<const KvzapSurrogate> s) override {
    dropper_->set_surrogate(std::move(s));
  }
  void set_selection(const TokenSelection& s) override { dropper_->set_selection(s); }
  [[nodiscard]] const TokenSelection& selection() const override { return dropper_->selection(); }

  /// The dropper's plan at r_drop.
  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    return dropper_->plan_layer(LayerInput{in.kv, in.stats, in.model, in.layers, r_drop(in.ratio)});
  }
  [[nodiscard]] bool selects_globally() const override { return dropper_->selects_globally(); }
  void select_globally(std::vector<LayerPlan>& layers, const KvShape& shape,
                       double ratio) const override {
    dropper_->select_globally(layers, shape, r_drop(ratio));
  }
  [[nodiscard]] bool quantizes() const override { return true; }

  /// The quantizer fits the dropper's kept rows into the whole budget.
  [[nodiscard]] QuantSpec plan_quant(const KvShape& shape, std::vector<size_t> rows,
                                     double ratio) const override {
    return quantizer_->plan_quant(shape, std::move(rows), ratio);
  }

  /// The quantizer's bound over every position: the kept rows are fewer, and the
  /// quantizer fits them into the same budget.
  [[nodiscard]] std::optional<size_t> stored_bytes_bound(const KvShape& shape,
                                                         double ratio) const override {
    return quantizer_->stored_bytes_bound(shape, ratio);
  }

  [[nodiscard]] bool stores_keys_before_rope() const override {
    return quantizer_->stores_keys_before_rope();
  }

  size_t quantize(size_t l, size_t g, const int32_t* positions, size_t n, size_t head_dim,
                  const ModelFacts& model, float* k, float* v,
                  PackedHead* packed = nullptr) const override {
    return quantizer_->quantize(l, g, positions, n, head_dim, model, k, v, packed);
  }

 private:
  [[nodiscard]] double r_drop(double ratio) const {
    if (!(ratio >= 1.0) || !std::isfinite(ratio)) {
      throw Error(name_ + ": compression ratio must be a finite number >= 1, got " + std::to_string(ratio));
    }
    return std::max(1.0, std::pow(ratio, share_));
  }

  std::unique_ptr<Compressor> dropper_, quantizer_;
  std::string name_, summary_;
  double share_ = 0.5;
};

}  // namespace

std::unique_ptr<Compressor> make_composition(std::unique_ptr<Compressor> dropper,
                                             std::unique_ptr<Compressor> quantizer) {
  if (!dropper || !quantizer) throw Error("make_composition: needs a dropper and a quantizer");
  return std::make_unique<Composition>(std::move(dropper), std::move(quantizer));
}

}  // namespace vc

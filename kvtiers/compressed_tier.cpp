// The compressed tier: applies a compressor's plan to a request's KV snapshot,
// keeping the planned rows of each (layer, KV head) as the method's codec stores
// them, and counting the bytes they take at the plan's precision.
#include "kvtiers/compressed_tier.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

namespace {

std::string at(size_t l, size_t g) {
  return "layer " + std::to_string(l) + ", KV head " + std::to_string(g);
}

// Throws vc::Error unless `plan` fits `kv` (and `model` its positions).
void validate(const KvSnapshot& kv, const CompressionPlan& plan, const ModelFacts& model) {
  const size_t elems = kv.layers * kv.kv_heads * kv.n_pos * kv.head_dim;
  if (kv.k.size() != elems || kv.v.size() != elems)
    throw Error("CompressedView: the snapshot holds " + std::to_string(kv.k.size()) + " K and " +
                std::to_string(kv.v.size()) + " V values, its shape needs " +
                std::to_string(elems));
  if (!model.positions.empty() && model.positions.size() != kv.n_pos)
    throw Error("CompressedView: model.positions has " + std::to_string(model.positions.size()) +
                " entries for " + std::to_string(kv.n_pos) + " snapshot positions");
  if (plan.keep.size() != kv.layers)
    throw Error("CompressedView: the plan has " + std::to_string(plan.keep.size()) +
                " layers, the snapshot " + std::to_string(kv.layers));
  for (size_t l = 0; l < kv.layers; ++l) {
    if (plan.keep[l].size() != kv.kv_heads)
      throw Error("CompressedView: the plan's layer " + std::to_string(l) + " has " +
                  std::to_string(plan.keep[l].size()) + " KV heads, the snapshot " +
                  std::to_string(kv.kv_heads));
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      const std::vector<int32_t>& keep = plan.keep[l][g];
      for (size_t i = 0; i < keep.size(); ++i) {
        if (keep[i] < 0 || size_t(keep[i]) >= kv.n_pos)
          throw Error("CompressedView: plan for " + at(l, g) + ": position " +
                      std::to_string(keep[i]) + " (entry " + std::to_string(i) +
                      ") is outside [0, " + std::to_string(kv.n_pos) + ")");
        if (i > 0 && keep[i] <= keep[i - 1])
          throw Error("CompressedView: plan for " + at(l, g) + ": positions are not ascending " +
                      "and unique (entry " + std::to_string(i) + ": " +
                      std::to_string(keep[i - 1]) + " then " + std::to_string(keep[i]) + ")");
      }
    }
  }
}

}  // namespace

CompressedView CompressedView::build(const KvSnapshot& kv, const CompressionPlan& plan,
                                     const Compressor& codec, const ModelFacts& model) {
  validate(kv, plan, model);
  CompressedView view;
  view.layers_ = kv.layers;
  view.kv_heads_ = kv.kv_heads;
  view.head_dim_ = kv.head_dim;
  view.covered_ = kv.n_pos;
  view.quant_ = plan.quant;
  view.heads_.resize(kv.layers * kv.kv_heads);
  const size_t d = kv.head_dim;
  std::vector<int32_t> abs_pos;
  for (size_t l = 0; l < kv.layers; ++l) {
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      Head& head = view.heads_[l * kv.kv_heads + g];
      head.positions = plan.keep[l][g];
      const size_t n = head.positions.size();
      head.k.resize(n * d);
      head.v.resize(n * d);
      abs_pos.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t p = size_t(head.positions[i]);
        std::memcpy(&head.k[i * d], kv.k_at(l, g, p), d * sizeof(float));
        std::memcpy(&head.v[i * d], kv.v_at(l, g, p), d * sizeof(float));
        abs_pos[i] = model.positions.empty() ? int32_t(p) : model.positions[p];
      }
      // A head that keeps nothing stores nothing: the codec is not asked.
      if (n > 0)
        view.stored_bytes_ +=
            codec.quantize(l, g, abs_pos.data(), n, d, model, head.k.data(), head.v.data());
    }
  }
  return view;
}

}  // namespace vc

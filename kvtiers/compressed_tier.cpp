// The compressed tier: applies a compressor's plan to a request's KV snapshot,
// keeping the planned rows of each (layer, KV head) as the method's codec stores
// them, and counting the bytes they take at the plan's precision.
#include "kvtiers/compressed_tier.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
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

// Holds the values `x` of a codec that did not describe its storage: as bf16 when
// that is exact for every value, else as fp32.
void hold_undescribed(PackedSide& side, const std::vector<float>& x) {
  side = PackedSide{};
  for (float e : x) {
    const float b = bf16_to_f32(f32_to_bf16(e));
    if (std::memcmp(&b, &e, sizeof(float)) != 0) {
      side.raw = x;
      return;
    }
  }
  pack_bf16(side, x.data(), x.size());
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
  std::vector<float> k, v;
  for (size_t l = 0; l < kv.layers; ++l) {
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      Head& head = view.heads_[l * kv.kv_heads + g];
      head.positions = plan.keep[l][g];
      const size_t n = head.positions.size();
      // A head that keeps nothing stores nothing: the codec is not asked.
      if (n == 0) continue;
      k.resize(n * d);
      v.resize(n * d);
      abs_pos.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t p = size_t(head.positions[i]);
        std::memcpy(&k[i * d], kv.k_at(l, g, p), d * sizeof(float));
        std::memcpy(&v[i * d], kv.v_at(l, g, p), d * sizeof(float));
        abs_pos[i] = model.positions.empty() ? int32_t(p) : model.positions[p];
      }
      view.stored_bytes_ +=
          codec.quantize(l, g, abs_pos.data(), n, d, model, k.data(), v.data(), &head.packed);
      if (!head.packed.described) {
        hold_undescribed(head.packed.k, k);
        hold_undescribed(head.packed.v, v);
        head.packed.described = true;
      }
      if (head.packed.k.transform == PackedTransform::rope ||
          head.packed.v.transform == PackedTransform::rope) {
        if (view.rope_inv_freq_.empty()) view.rope_inv_freq_ = model.rope_inv_freq;
        if (abs_pos != head.positions) head.abs_positions = abs_pos;
      }
    }
  }
  return view;
}

void CompressedView::decode(size_t l, size_t g, float* k, float* v) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  if (n == 0) return;
  const int32_t* pos = head.abs_positions.empty() ? head.positions.data() : head.abs_positions.data();
  head.packed.k.decode(k, n, head_dim_, pos, rope_inv_freq_.data());
  head.packed.v.decode(v, n, head_dim_, pos, rope_inv_freq_.data());
}

size_t CompressedView::held_bytes() const {
  size_t bytes = rope_inv_freq_.size() * sizeof(float);
  for (const Head& head : heads_) {
    bytes += (head.positions.size() + head.abs_positions.size()) * sizeof(int32_t) +
             head.packed.k.held_bytes() + head.packed.v.held_bytes();
  }
  return bytes;
}

}  // namespace vc

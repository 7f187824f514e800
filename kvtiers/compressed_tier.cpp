// The compressed tier: applies a compressor's plan to a request's KV one layer at
// a time, keeping the planned rows of each (layer, KV head) as the method's codec stores
// them, and counting the bytes they take at the plan's precision.
#include "kvtiers/compressed_tier.hpp"

#include <algorithm>
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

void validate_keep(size_t l, size_t first, size_t kv_heads, size_t n_pos,
                   const std::vector<std::vector<int32_t>>& keep, const ModelFacts& model);

// Throws vc::Error unless `keep` fits the slice `kv` of a view of `v_dim` head_dim
// and `v_pos` positions (and `model` its positions).
void validate(const LayerKv& kv, size_t v_dim, size_t v_pos,
              const std::vector<std::vector<int32_t>>& keep, const ModelFacts& model) {
  const size_t l = kv.layer;
  const size_t elems = kv.kv_heads * kv.n_pos * kv.head_dim;
  if (kv.k.size() != elems || kv.v.size() != elems)
    throw Error("CompressedView: layer " + std::to_string(l) + " holds " +
                std::to_string(kv.k.size()) + " K and " + std::to_string(kv.v.size()) +
                " V values, its shape needs " + std::to_string(elems));
  if (kv.head_dim != v_dim || kv.n_pos != v_pos)
    throw Error("CompressedView: layer " + std::to_string(l) + " has shape (head_dim " +
                std::to_string(kv.head_dim) + ", n_pos " + std::to_string(kv.n_pos) +
                "), the view (" + std::to_string(v_dim) + ", " + std::to_string(v_pos) + ")");
  validate_keep(l, kv.first_head, kv.kv_heads, kv.n_pos, keep, model);
}

// Throws vc::Error unless `keep` is a valid plan of KV heads [first, first +
// kv_heads) of layer l over n_pos positions (and `model` has positions for them).
void validate_keep(size_t l, size_t first, size_t kv_heads, size_t n_pos,
                   const std::vector<std::vector<int32_t>>& keep, const ModelFacts& model) {
  if (!model.positions.empty() && model.positions.size() != n_pos)
    throw Error("CompressedView: model.positions has " + std::to_string(model.positions.size()) +
                " entries for " + std::to_string(n_pos) + " snapshot positions");
  if (keep.size() != kv_heads)
    throw Error("CompressedView: the plan's layer " + std::to_string(l) + " has " +
                std::to_string(keep.size()) + " KV heads, the snapshot " +
                std::to_string(kv_heads));
  for (size_t g = 0; g < kv_heads; ++g) {
    const std::vector<int32_t>& k = keep[g];
    for (size_t i = 0; i < k.size(); ++i) {
      if (k[i] < 0 || size_t(k[i]) >= n_pos)
        throw Error("CompressedView: plan for " + at(l, first + g) + ": position " +
                    std::to_string(k[i]) + " (entry " + std::to_string(i) +
                    ") is outside [0, " + std::to_string(n_pos) + ")");
      if (i > 0 && k[i] <= k[i - 1])
        throw Error("CompressedView: plan for " + at(l, first + g) + ": positions are not ascending " +
                    "and unique (entry " + std::to_string(i) + ": " + std::to_string(k[i - 1]) +
                    " then " + std::to_string(k[i]) + ")");
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

CompressedView::CompressedView(const KvShape& shape, QuantSpec quant)
    : layers_(shape.layers), kv_heads_(shape.kv_heads), head_dim_(shape.head_dim),
      covered_(shape.n_pos), quant_(quant), heads_(shape.layers * shape.kv_heads) {}

void CompressedView::add_heads(const LayerKv& kv, const std::vector<std::vector<int32_t>>& keep,
                               const Compressor& codec, const ModelFacts& model) {
  version_.renew();  // a device's copy of the rows so far is stale
  const size_t next = built_heads_;
  if (kv_heads_ == 0 || next >= layers_ * kv_heads_ || kv.layer != next / kv_heads_ ||
      kv.first_head != next % kv_heads_ || kv.kv_heads > kv_heads_ - kv.first_head)
    throw Error("CompressedView: layer " + std::to_string(kv.layer) + ", KV heads " +
                std::to_string(kv.first_head) + "+" + std::to_string(kv.kv_heads) +
                " added, expected " + at(next / std::max<size_t>(1, kv_heads_),
                                         next % std::max<size_t>(1, kv_heads_)) +
                " of " + std::to_string(layers_) + " layers");
  validate(kv, head_dim_, covered_, keep, model);
  const size_t l = kv.layer, d = head_dim_;
  std::vector<int32_t> abs_pos;
  std::vector<float> k, v;
  for (size_t j = 0; j < kv.kv_heads; ++j) {
    const size_t g = kv.first_head + j;
    Head& head = heads_[l * kv_heads_ + g];
    const Head* prev = l * kv_heads_ + g > 0 ? &heads_[l * kv_heads_ + g - 1] : nullptr;
    head.positions = PositionList(keep[j], prev ? &prev->positions : nullptr);
    const size_t n = head.positions.size();
    // A head that keeps nothing stores nothing: the codec is not asked.
    if (n == 0) continue;
    k.resize(n * d);
    v.resize(n * d);
    abs_pos.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t p = size_t(head.positions[i]);
      std::memcpy(&k[i * d], kv.k_at(j, p), d * sizeof(float));
      std::memcpy(&v[i * d], kv.v_at(j, p), d * sizeof(float));
      abs_pos[i] = model.positions.empty() ? int32_t(p) : model.positions[p];
    }
    stored_bytes_ += codec.quantize(l, g, abs_pos.data(), n, d, model, k.data(), v.data(),
                                    &head.packed);
    if (!head.packed.described) {
      hold_undescribed(head.packed.k, k);
      hold_undescribed(head.packed.v, v);
      head.packed.described = true;
    }
    if (head.packed.k.transform == PackedTransform::rope ||
        head.packed.v.transform == PackedTransform::rope) {
      if (rope_inv_freq_.empty()) rope_inv_freq_ = model.rope_inv_freq;
      if (abs_pos != head.positions.values())
        head.abs_positions = PositionList(abs_pos, prev ? &prev->abs_positions : nullptr);
    }
  }
  built_heads_ += kv.kv_heads;
}

CompressedView CompressedView::build(const KvSnapshot& kv, const CompressionPlan& plan,
                                     const Compressor& codec, const ModelFacts& model) {
  const size_t elems = kv.layers * kv.kv_heads * kv.n_pos * kv.head_dim;
  if (kv.k.size() != elems || kv.v.size() != elems)
    throw Error("CompressedView: the snapshot holds " + std::to_string(kv.k.size()) + " K and " +
                std::to_string(kv.v.size()) + " V values, its shape needs " +
                std::to_string(elems));
  if (plan.keep.size() != kv.layers)
    throw Error("CompressedView: the plan has " + std::to_string(plan.keep.size()) +
                " layers, the snapshot " + std::to_string(kv.layers));
  // The whole plan is checked before the codec sees any row.
  for (size_t l = 0; l < kv.layers; ++l)
    validate_keep(l, 0, kv.kv_heads, kv.n_pos, plan.keep[l], model);
  CompressedView view(kv.shape(), plan.quant);
  LayerKv layer;
  for (size_t l = 0; l < kv.layers; ++l) {
    kv.read_layer(l, layer);
    view.add_heads(layer, plan.keep[l], codec, model);
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

void CompressedView::decode_rows(size_t l, size_t g, size_t r0, size_t r1, float* k,
                                 float* v) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  if (r0 >= std::min(r1, n)) return;
  const int32_t* pos = head.abs_positions.empty() ? head.positions.data() : head.abs_positions.data();
  head.packed.k.decode_rows(k, r0, r1, n, head_dim_, pos, rope_inv_freq_.data());
  if (v != nullptr) head.packed.v.decode_rows(v, r0, r1, n, head_dim_, pos, rope_inv_freq_.data());
}

namespace {

// The element type `side` holds its n x d values in, when they are plain rows.
std::optional<DType> plain_rows(const PackedSide& side, size_t n, size_t d) {
  if (side.transform != PackedTransform::none) return std::nullopt;
  if (!side.raw.empty()) return side.raw.size() == n * d ? std::optional(DType::f32) : std::nullopt;
  if (side.quant_rows == 0 && side.outlier_index.empty() && side.full.size() == n * d)
    return DType::bf16;
  return std::nullopt;
}

const void* plain_data(const PackedSide& side) {
  return side.raw.empty() ? static_cast<const void*>(side.full.data()) : side.raw.data();
}

}  // namespace

CompressedView::QuantSides CompressedView::quant_sides(size_t l, size_t g) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  const int32_t* pos = head.abs_positions.empty() ? head.positions.data() : head.abs_positions.data();
  const float* inv = rope_inv_freq_.size() * 2 == head_dim_ ? rope_inv_freq_.data() : nullptr;
  return {head.packed.k.quant_rows_view(n, false, pos, inv),
          head.packed.v.quant_rows_view(n, false, pos, inv)};
}

bool CompressedView::hadamard_basis(size_t l, size_t g) const {
  const Head& head = heads_[l * kv_heads_ + g];
  return head.packed.k.transform == PackedTransform::hadamard &&
         head.packed.v.transform == PackedTransform::hadamard;
}

void CompressedView::decode_rows_rotated(size_t l, size_t g, size_t r0, size_t r1, float* k,
                                         float* v) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  if (r0 >= std::min(r1, n)) return;
  head.packed.k.decode_rows(k, r0, r1, n, head_dim_, nullptr, nullptr, false);
  if (v != nullptr) head.packed.v.decode_rows(v, r0, r1, n, head_dim_, nullptr, nullptr, false);
}

CompressedView::QuantSides CompressedView::quant_sides_rotated(size_t l, size_t g) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  return {head.packed.k.quant_rows_view(n, true), head.packed.v.quant_rows_view(n, true)};
}

CompressedView::Stored CompressedView::stored(size_t l, size_t g) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const int32_t* pos = head.abs_positions.empty() ? head.positions.data() : head.abs_positions.data();
  return {&head.packed, pos, rope_inv_freq_.size() * 2 == head_dim_ ? rope_inv_freq_.data() : nullptr};
}

std::optional<CompressedView::Rows> CompressedView::rows_in_place(size_t l, size_t g) const {
  const Head& head = heads_[l * kv_heads_ + g];
  const size_t n = head.positions.size();
  const std::optional<DType> k = plain_rows(head.packed.k, n, head_dim_);
  const std::optional<DType> v = plain_rows(head.packed.v, n, head_dim_);
  if (n == 0 || !k || !v || *k != *v) return std::nullopt;
  return Rows{*k, plain_data(head.packed.k), plain_data(head.packed.v)};
}

size_t CompressedView::held_bytes() const {
  size_t bytes = rope_inv_freq_.size() * sizeof(float);
  const Head* prev = nullptr;  // a shared position array is held once (heads share
                               // only with the head before them)
  for (const Head& head : heads_) {
    if (prev == nullptr || !head.positions.shares(prev->positions))
      bytes += head.positions.size() * sizeof(int32_t);
    if (prev == nullptr || !head.abs_positions.shares(prev->abs_positions))
      bytes += head.abs_positions.size() * sizeof(int32_t);
    bytes += head.packed.k.held_bytes() + head.packed.v.held_bytes();
    prev = &head;
  }
  return bytes;
}

}  // namespace vc

// The compressed tier: one request's compressed view of its KV, in fast memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/content_version.hpp"
#include "kvtiers/position_list.hpp"

namespace vc {

/// Kept rows of every (layer, KV head), held at the plan's precision: what the
/// codec describes (PackedHead: packed codes, fp16 scales and zeros, bf16
/// full-precision rows and outliers, and the transform to re-apply), or, from a
/// codec that does not describe its storage, bf16 rows when its values are all bf16
/// and fp32 rows otherwise. decode() gives back exactly the fp32 values the codec's
/// quantize() wrote, for the CPU draft attention. stored_bytes() counts what the
/// codec reports it stores (what every budget is charged); held_bytes() what this
/// view actually holds.
class CompressedView {
 public:
  /// An empty view of `shape`'s positions stored with `quant`, to be filled slice
  /// by slice (add_heads: layer 0's heads in order, then layer 1's, ...).
  CompressedView(const KvShape& shape, QuantSpec quant);
  CompressedView() = default;
  /// Applies `keep` ([kv.kv_heads] ascending positions) to the KV heads of `kv`, a
  /// slice of layer kv.layer that must start at the next (layer, head) to build
  /// (quantizing kept rows through `codec.quantize`). `model`'s positions, when
  /// given, are the absolute positions of the n_pos indices.
  void add_heads(const LayerKv& kv, const std::vector<std::vector<int32_t>>& keep,
                 const Compressor& codec, const ModelFacts& model);
  /// True once every (layer, KV head) was added.
  [[nodiscard]] bool complete() const { return built_heads_ == layers_ * kv_heads_; }

  /// Applies `plan` to `kv` (quantizing kept rows through `codec.quantize`).
  [[nodiscard]] static CompressedView build(const KvSnapshot& kv, const CompressionPlan& plan,
                                            const Compressor& codec, const ModelFacts& model);

  [[nodiscard]] size_t layers() const { return layers_; }
  [[nodiscard]] size_t kv_heads() const { return kv_heads_; }
  [[nodiscard]] size_t head_dim() const { return head_dim_; }
  /// Positions [0, covered()) are represented by this view; later positions live in
  /// the request's paged tail.
  [[nodiscard]] size_t covered() const { return covered_; }
  /// The first position represented: 0, except for a slice (positions [first(),
  /// covered()) of a larger view) that nothing was appended to yet.
  [[nodiscard]] size_t first() const { return first_; }

  // Moving a view in pieces (compressed_view_pieces.cpp): the remote tier stores a
  // prefix's view chunk by chunk and puts chunks fetched back together.

  /// The kept rows of every head at positions [p0, p1) (p0 >= first(), p1 <=
  /// covered()), as a view of its own: first() p0, covered() p1, positions
  /// unchanged, each side's stored form cut at those rows (bits for bits). nullopt,
  /// with `why`, when a quantization block straddles a cut, or a quantized row
  /// would start inside a byte of packed codes.
  [[nodiscard]] std::optional<CompressedView> slice(size_t p0, size_t p1, std::string& why) const;
  /// Appends `next`, a view of the same shape and precision starting at covered():
  /// afterwards covered() is next.covered(). False (this view unchanged), with
  /// `why`, when the stored forms cannot be joined (other bits, blocks or
  /// transform; bf16 rows of this view before quantized rows of `next`; a partial
  /// block at the end of this view).
  [[nodiscard]] bool append(const CompressedView& next, std::string& why);
  /// Every field, little-endian, for deserialize().
  [[nodiscard]] std::string serialize() const;
  /// A view written by serialize(), checked for consistency (sizes of every
  /// vector against its rows, positions ascending in [first, covered), outlier
  /// indices in range) so that drafting over it reads only its own bytes; nullopt
  /// with `why` otherwise.
  [[nodiscard]] static std::optional<CompressedView> deserialize(std::span<const std::byte> bytes,
                                                                 std::string& why);

  [[nodiscard]] size_t count(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].positions.size(); }
  [[nodiscard]] const int32_t* positions(size_t l, size_t g) const { return heads_[l * kv_heads_ + g].positions.data(); }
  /// Writes the kept K and V rows of layer l, KV head g, dequantized, into k and v
  /// ([count(l, g), head_dim] fp32 each).
  void decode(size_t l, size_t g, float* k, float* v) const;
  /// Rows [r0, r1) of what decode() writes, bit-identical ([r1 - r0, head_dim]
  /// each; v null: the K rows only): the drafter dequantizes one block of rows at a
  /// time.
  void decode_rows(size_t l, size_t g, size_t r0, size_t r1, float* k, float* v) const;
  /// The kept K and V rows of layer l, KV head g as stored, when both sides hold
  /// them unquantized and untransformed in one element type (token dropping:
  /// bf16, or fp32 from an undescribed codec), so the drafter reads them in place;
  /// nullopt when they must go through decode().
  struct Rows {
    DType dtype;
    const void* k;
    const void* v;
  };
  [[nodiscard]] std::optional<Rows> rows_in_place(size_t l, size_t g) const;
  /// The K and V sides of layer l, KV head g whose quantized rows the drafter's
  /// kernel may read straight from their codes, outliers included
  /// (PackedSide::quant_rows_view): a side with a transform (KVQuant's RoPE keys,
  /// RotateKV's rotation), no quantized rows or fp32 values is nullopt and goes
  /// through decode_rows().
  struct QuantSides {
    std::optional<cpu::QuantRows> k, v;
  };
  [[nodiscard]] QuantSides quant_sides(size_t l, size_t g) const;
  /// True when both sides of layer l, KV head g are stored Hadamard-rotated
  /// (RotateKV): the drafter then attends in their basis (cpu::DenseKvHead::hadamard)
  /// through the two calls below instead of rotating every row back.
  [[nodiscard]] bool hadamard_basis(size_t l, size_t g) const;
  /// decode_rows() without the inverse rotation (hadamard_basis() heads only).
  void decode_rows_rotated(size_t l, size_t g, size_t r0, size_t r1, float* k, float* v) const;
  /// quant_sides() of a hadamard_basis() head: its codes give the rotated rows.
  [[nodiscard]] QuantSides quant_sides_rotated(size_t l, size_t g) const;

  /// Layer l, KV head g's sides as stored (see PackedSide), with what decoding
  /// them reads: each kept row's absolute position and, when a side is stored
  /// before RoPE, the head_dim / 2 RoPE frequencies (else null). A device backend
  /// copies these and dequantizes them as PackedSide::decode does.
  struct Stored {
    const PackedHead* head;
    const int32_t* positions;
    const float* rope_inv_freq;
  };
  [[nodiscard]] Stored stored(size_t l, size_t g) const;

  /// Names this view's contents for copies kept elsewhere (a device's copy of its
  /// kept rows): a new id once the view is built up, appended to or copied;
  /// lifetime() expires when the view is gone or changed.
  [[nodiscard]] uint64_t id() const { return version_.id(); }
  [[nodiscard]] std::weak_ptr<const void> lifetime() const { return version_.lifetime(); }

  /// Bytes stored at the plan's precision.
  [[nodiscard]] size_t stored_bytes() const { return stored_bytes_; }
  /// Bytes this view holds for its KV: packed codes, scales and zeros,
  /// full-precision rows and outliers, kept positions (and absolute positions and
  /// RoPE frequencies where keys are stored pre-RoPE).
  [[nodiscard]] size_t held_bytes() const;
  /// Bytes of the same positions in the full tier (bf16).
  [[nodiscard]] size_t full_bytes() const {
    return (covered_ - first_) * layers_ * kv_heads_ * head_dim_ * 2 * 2;
  }
  [[nodiscard]] const QuantSpec& quant() const { return quant_; }

 private:
  struct Head {
    PositionList positions;      // snapshot indices (shared by heads keeping the same rows)
    PositionList abs_positions;  // for RoPE, only when they differ from positions
    PackedHead packed;
  };
  size_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, covered_ = 0, stored_bytes_ = 0;
  size_t first_ = 0;
  size_t built_heads_ = 0;  // (layer, KV head) pairs built, in order
  QuantSpec quant_;
  std::vector<float> rope_inv_freq_;  // held only when a side is stored pre-RoPE
  std::vector<Head> heads_;  // [layers * kv_heads]
  ContentVersion version_;
};

}  // namespace vc

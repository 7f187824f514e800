// Moving a compressed view in pieces: cutting it at positions (each side's stored
// form cut at row boundaries, bit for bit), joining pieces back, and the byte form
// a piece travels in. The remote tier stores a prefix's view chunk by chunk.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvtiers/compressed_tier.hpp"

namespace vc {

namespace {

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

size_t col_blocks(const PackedSide& s, size_t d) { return ceil_div(d, std::max<size_t>(s.block.cols, 1)); }

// Rows [r0, r1) of a side of n x d values, into `out`; false with `why` when a cut
// falls inside a quantization block or a byte of codes.
bool slice_side(const PackedSide& s, size_t n, size_t d, size_t r0, size_t r1, PackedSide& out,
                std::string& why) {
  out = PackedSide{};
  out.bits = s.bits;
  out.block = s.block;
  out.transform = s.transform;
  if (!s.raw.empty()) {
    out.raw.assign(s.raw.begin() + ptrdiff_t(r0 * d), s.raw.begin() + ptrdiff_t(r1 * d));
    return true;
  }
  const size_t q = std::min(s.quant_rows, n), qa = std::min(r0, q), qb = std::min(r1, q);
  out.quant_rows = qb - qa;
  if (qb > qa) {
    const size_t br = std::max<size_t>(s.block.rows, 1), cb = col_blocks(s, d);
    if (qa % br != 0 || (qb % br != 0 && qb != q)) {
      why = "a quantization block of " + std::to_string(br) + " rows straddles row " +
            std::to_string(qa % br != 0 ? qa : qb);
      return false;
    }
    if ((qa * d * size_t(s.bits)) % 8 != 0) {
      why = "row " + std::to_string(qa) + " starts inside a byte of " + std::to_string(s.bits) + "-bit codes";
      return false;
    }
    const size_t b0 = qa / br * cb, b1 = ceil_div(qb, br) * cb;
    out.scale.assign(s.scale.begin() + ptrdiff_t(b0), s.scale.begin() + ptrdiff_t(b1));
    out.zero.assign(s.zero.begin() + ptrdiff_t(b0), s.zero.begin() + ptrdiff_t(b1));
    const size_t c0 = qa * d * size_t(s.bits) / 8, c1 = ceil_div(qb * d * size_t(s.bits), 8);
    out.codes.assign(s.codes.begin() + ptrdiff_t(c0), s.codes.begin() + ptrdiff_t(c1));
  }
  for (size_t r = std::max(r0, q); r < r1; ++r) {
    const auto row = s.full.begin() + ptrdiff_t((r - q) * d);
    out.full.insert(out.full.end(), row, row + ptrdiff_t(d));
  }
  for (size_t i = 0; i < s.outlier_index.size(); ++i)
    if (s.outlier_index[i] >= r0 * d && s.outlier_index[i] < r1 * d) {
      out.outlier_index.push_back(uint32_t(s.outlier_index[i] - r0 * d));
      out.outlier_value.push_back(s.outlier_value[i]);
    }
  return true;
}

// Side `a` (na rows) followed by side `b` (nb rows), into `out`.
bool join_sides(const PackedSide& a, size_t na, const PackedSide& b, size_t nb, size_t d,
                PackedSide& out, std::string& why) {
  if (nb == 0 || na == 0) {
    out = nb == 0 ? a : b;
    return true;
  }
  if (a.transform != b.transform) {
    why = "the pieces apply different transforms";
    return false;
  }
  if (!a.raw.empty() || !b.raw.empty()) {
    if (a.raw.size() != na * d || b.raw.size() != nb * d) {
      why = "fp32 rows joined with packed rows";
      return false;
    }
    out = a;
    out.raw.insert(out.raw.end(), b.raw.begin(), b.raw.end());
    return true;
  }
  const size_t qa = std::min(a.quant_rows, na), qb = std::min(b.quant_rows, nb);
  out = a;
  if (qb > 0) {
    if (qa < na) {
      why = "bf16 rows before quantized rows";
      return false;
    }
    if (qa > 0) {
      if (a.bits != b.bits || a.block.rows != b.block.rows || a.block.cols != b.block.cols) {
        why = "the pieces are quantized differently (" + std::to_string(a.bits) + " vs " +
              std::to_string(b.bits) + " bits, blocks " + std::to_string(a.block.rows) + "x" +
              std::to_string(a.block.cols) + " vs " + std::to_string(b.block.rows) + "x" +
              std::to_string(b.block.cols) + ")";
        return false;
      }
      if (qa % std::max<size_t>(a.block.rows, 1) != 0 || (qa * d * size_t(a.bits)) % 8 != 0) {
        why = "the first piece ends inside a quantization block or a byte of codes";
        return false;
      }
    } else {
      out.bits = b.bits;
      out.block = b.block;
    }
    out.codes.resize(qa * d * size_t(out.bits) / 8);
    out.codes.insert(out.codes.end(), b.codes.begin(), b.codes.end());
    out.scale.insert(out.scale.end(), b.scale.begin(), b.scale.end());
    out.zero.insert(out.zero.end(), b.zero.begin(), b.zero.end());
  }
  out.quant_rows = qa + qb;
  out.full.insert(out.full.end(), b.full.begin(), b.full.end());
  for (size_t i = 0; i < b.outlier_index.size(); ++i) {
    out.outlier_index.push_back(uint32_t(b.outlier_index[i] + na * d));
    out.outlier_value.push_back(b.outlier_value[i]);
  }
  return true;
}

// Little-endian writer and bounds-checked reader of the byte form.
class Writer {
 public:
  template <class T>
  void put(T x) {
    out_.append(reinterpret_cast<const char*>(&x), sizeof(T));
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  template <class T>
  bool get(T& x) {
    if (b_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&x, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <class T>
  bool get_vec(std::vector<T>& v, size_t max_elems) {
    uint64_t n = 0;
    if (!get(n) || n > max_elems || n > (b_.size() - at_) / sizeof(T)) return false;
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return true;
  }
  [[nodiscard]] bool done() const { return at_ == b_.size(); }

 private:
  std::span<const std::byte> b_;
  size_t at_ = 0;
};

constexpr uint32_t kViewFormat = 1;

void put_side(Writer& w, const PackedSide& s) {
  w.put<int32_t>(s.bits);
  w.put<uint64_t>(s.quant_rows);
  w.put<uint64_t>(s.block.rows);
  w.put<uint64_t>(s.block.cols);
  w.put<uint8_t>(uint8_t(s.transform));
  w.put_vec(s.scale);
  w.put_vec(s.zero);
  w.put_vec(s.codes);
  w.put_vec(s.full);
  w.put_vec(s.outlier_index);
  w.put_vec(s.outlier_value);
  w.put_vec(s.raw);
}

// Reads one side of n x d values and checks every size against n and d.
bool get_side(Reader& r, PackedSide& s, size_t n, size_t d, std::string& why) {
  uint64_t q = 0, br = 0, bc = 0;
  uint8_t t = 0;
  const size_t cap = n * d;
  if (!r.get(s.bits) || !r.get(q) || !r.get(br) || !r.get(bc) || !r.get(t) ||
      !r.get_vec(s.scale, cap) || !r.get_vec(s.zero, cap) || !r.get_vec(s.codes, cap * 4) ||
      !r.get_vec(s.full, cap) || !r.get_vec(s.outlier_index, cap) ||
      !r.get_vec(s.outlier_value, cap) || !r.get_vec(s.raw, cap)) {
    why = "truncated side";
    return false;
  }
  s.quant_rows = q;
  s.block = {br, bc};
  if (t > uint8_t(PackedTransform::rope)) {
    why = "unknown transform " + std::to_string(t);
    return false;
  }
  s.transform = PackedTransform(t);
  if (n == 0) return true;
  if (!s.raw.empty()) {
    if (s.raw.size() != n * d) why = "fp32 rows of the wrong size";
    return s.raw.size() == n * d;
  }
  if (q > n || s.full.size() != (n - q) * d || s.outlier_index.size() != s.outlier_value.size()) {
    why = "rows of the wrong size";
    return false;
  }
  if (q > 0) {
    if (s.bits < 1 || s.bits > 8 || br == 0 || bc == 0 ||
        s.codes.size() != ceil_div(q * d * size_t(s.bits), 8) ||
        s.scale.size() != ceil_div(q, br) * ceil_div(d, bc) || s.zero.size() != s.scale.size()) {
      why = "quantized rows of the wrong size";
      return false;
    }
  }
  for (size_t i = 0; i < s.outlier_index.size(); ++i)
    if (s.outlier_index[i] >= n * d || (i > 0 && s.outlier_index[i] <= s.outlier_index[i - 1])) {
      why = "outlier index out of order or range";
      return false;
    }
  return true;
}

size_t packed_bytes(const PackedHead& p) { return p.k.held_bytes() + p.v.held_bytes(); }

}  // namespace

std::optional<CompressedView> CompressedView::slice(size_t p0, size_t p1, std::string& why) const {
  if (p0 < first_ || p1 > covered_ || p0 > p1) {
    why = "positions [" + std::to_string(p0) + ", " + std::to_string(p1) + ") are outside the view's [" +
          std::to_string(first_) + ", " + std::to_string(covered_) + ")";
    return std::nullopt;
  }
  CompressedView out;
  out.layers_ = layers_, out.kv_heads_ = kv_heads_, out.head_dim_ = head_dim_;
  out.first_ = p0, out.covered_ = p1, out.quant_ = quant_;
  out.built_heads_ = built_heads_;
  out.heads_.resize(heads_.size());
  bool rope = false;
  for (size_t h = 0; h < heads_.size(); ++h) {
    const Head& src = heads_[h];
    Head& dst = out.heads_[h];
    const auto b = std::lower_bound(src.positions.begin(), src.positions.end(), int32_t(p0));
    const auto e = std::lower_bound(src.positions.begin(), src.positions.end(), int32_t(p1));
    const size_t r0 = size_t(b - src.positions.begin()), r1 = size_t(e - src.positions.begin());
    const size_t n = src.positions.size();
    const Head* prev = h > 0 ? &out.heads_[h - 1] : nullptr;
    dst.positions = PositionList(std::vector<int32_t>(b, e), prev ? &prev->positions : nullptr);
    if (!src.abs_positions.empty())
      dst.abs_positions = PositionList(std::vector<int32_t>(src.abs_positions.begin() + ptrdiff_t(r0),
                                                            src.abs_positions.begin() + ptrdiff_t(r1)),
                                       prev ? &prev->abs_positions : nullptr);
    if (r1 == r0) continue;
    dst.packed.described = src.packed.described;
    std::string side_why;
    if (!slice_side(src.packed.k, n, head_dim_, r0, r1, dst.packed.k, side_why) ||
        !slice_side(src.packed.v, n, head_dim_, r0, r1, dst.packed.v, side_why)) {
      why = "layer " + std::to_string(h / kv_heads_) + ", KV head " + std::to_string(h % kv_heads_) +
            ": " + side_why;
      return std::nullopt;
    }
    rope |= dst.packed.k.transform == PackedTransform::rope || dst.packed.v.transform == PackedTransform::rope;
    out.stored_bytes_ += packed_bytes(dst.packed);
  }
  if (rope) out.rope_inv_freq_ = rope_inv_freq_;
  return out;
}

bool CompressedView::append(const CompressedView& next, std::string& why) {
  if (next.layers_ != layers_ || next.kv_heads_ != kv_heads_ || next.head_dim_ != head_dim_ ||
      next.heads_.size() != heads_.size()) {
    why = "a piece of another shape";
    return false;
  }
  if (next.quant_.key_bits != quant_.key_bits || next.quant_.value_bits != quant_.value_bits) {
    why = "a piece of another precision";
    return false;
  }
  if (next.first_ != covered_) {
    why = "a piece starting at position " + std::to_string(next.first_) + ", the view ends at " +
          std::to_string(covered_);
    return false;
  }
  std::vector<Head> joined(heads_.size());
  size_t stored = 0;
  for (size_t h = 0; h < heads_.size(); ++h) {
    const Head& a = heads_[h];
    const Head& b = next.heads_[h];
    Head& o = joined[h];
    const size_t na = a.positions.size(), nb = b.positions.size();
    const Head* prev = h > 0 ? &joined[h - 1] : nullptr;
    std::vector<int32_t> pos(a.positions.begin(), a.positions.end());
    pos.insert(pos.end(), b.positions.begin(), b.positions.end());
    o.positions = PositionList(std::move(pos), prev ? &prev->positions : nullptr);
    if (!a.abs_positions.empty() || !b.abs_positions.empty()) {
      const PositionList& aabs = a.abs_positions.empty() ? a.positions : a.abs_positions;
      const PositionList& babs = b.abs_positions.empty() ? b.positions : b.abs_positions;
      std::vector<int32_t> abs(aabs.begin(), aabs.end());
      abs.insert(abs.end(), babs.begin(), babs.end());
      o.abs_positions = PositionList(std::move(abs), prev ? &prev->abs_positions : nullptr);
    }
    o.packed.described = na > 0 ? a.packed.described : b.packed.described;
    std::string side_why;
    if (!join_sides(a.packed.k, na, b.packed.k, nb, head_dim_, o.packed.k, side_why) ||
        !join_sides(a.packed.v, na, b.packed.v, nb, head_dim_, o.packed.v, side_why)) {
      why = "layer " + std::to_string(h / kv_heads_) + ", KV head " + std::to_string(h % kv_heads_) +
            ": " + side_why;
      return false;
    }
    stored += packed_bytes(o.packed);
  }
  heads_ = std::move(joined);
  covered_ = next.covered_;
  stored_bytes_ = stored;
  if (rope_inv_freq_.empty()) rope_inv_freq_ = next.rope_inv_freq_;
  version_.renew();  // a device's copy of the rows before is stale
  return true;
}

std::string CompressedView::serialize() const {
  Writer w;
  w.put<uint32_t>(kViewFormat);
  w.put<uint64_t>(layers_);
  w.put<uint64_t>(kv_heads_);
  w.put<uint64_t>(head_dim_);
  w.put<uint64_t>(first_);
  w.put<uint64_t>(covered_);
  w.put<uint64_t>(stored_bytes_);
  w.put<int32_t>(quant_.key_bits);
  w.put<int32_t>(quant_.value_bits);
  w.put_vec(rope_inv_freq_);
  for (const Head& h : heads_) {
    w.put_vec(h.positions.values());
    w.put_vec(h.abs_positions.values());
    w.put<uint8_t>(h.packed.described ? 1 : 0);
    put_side(w, h.packed.k);
    put_side(w, h.packed.v);
  }
  return w.take();
}

std::optional<CompressedView> CompressedView::deserialize(std::span<const std::byte> bytes,
                                                          std::string& why) {
  Reader r(bytes);
  CompressedView v;
  uint32_t format = 0;
  uint64_t layers = 0, kv_heads = 0, head_dim = 0, first = 0, covered = 0, stored = 0;
  if (!r.get(format) || format != kViewFormat) {
    why = "compressed view of another format";
    return std::nullopt;
  }
  if (!r.get(layers) || !r.get(kv_heads) || !r.get(head_dim) || !r.get(first) || !r.get(covered) ||
      !r.get(stored) || !r.get(v.quant_.key_bits) || !r.get(v.quant_.value_bits) ||
      !r.get_vec(v.rope_inv_freq_, head_dim) || first > covered || covered > (size_t(1) << 31) ||
      layers * kv_heads > bytes.size()) {
    why = "truncated or inconsistent view header";
    return std::nullopt;
  }
  v.layers_ = layers, v.kv_heads_ = kv_heads, v.head_dim_ = head_dim;
  v.first_ = first, v.covered_ = covered, v.stored_bytes_ = stored;
  v.heads_.resize(layers * kv_heads);
  v.built_heads_ = v.heads_.size();
  const size_t span = covered - first;
  for (size_t i = 0; i < v.heads_.size(); ++i) {
    Head& h = v.heads_[i];
    uint8_t described = 0;
    const std::string at = "layer " + std::to_string(i / kv_heads) + ", KV head " + std::to_string(i % kv_heads);
    std::vector<int32_t> pos, abs;
    if (!r.get_vec(pos, span) || !r.get_vec(abs, span) || !r.get(described)) {
      why = at + ": truncated";
      return std::nullopt;
    }
    const Head* prev = i > 0 ? &v.heads_[i - 1] : nullptr;
    h.positions = PositionList(std::move(pos), prev ? &prev->positions : nullptr);
    h.abs_positions = PositionList(std::move(abs), prev ? &prev->abs_positions : nullptr);
    h.packed.described = described != 0;
    const size_t n = h.positions.size();
    for (size_t j = 0; j < n; ++j)
      if (h.positions[j] < int32_t(first) || size_t(h.positions[j]) >= covered ||
          (j > 0 && h.positions[j] <= h.positions[j - 1])) {
        why = at + ": positions not ascending in [" + std::to_string(first) + ", " + std::to_string(covered) + ")";
        return std::nullopt;
      }
    std::string side_why;
    if ((!h.abs_positions.empty() && h.abs_positions.size() != n) ||
        !get_side(r, h.packed.k, n, head_dim, side_why) || !get_side(r, h.packed.v, n, head_dim, side_why)) {
      why = at + ": " + (side_why.empty() ? "absolute positions of the wrong size" : side_why);
      return std::nullopt;
    }
    const bool rope = h.packed.k.transform == PackedTransform::rope || h.packed.v.transform == PackedTransform::rope;
    if (n > 0 && rope && v.rope_inv_freq_.size() != head_dim / 2) {
      why = at + ": RoPE transform without its frequencies";
      return std::nullopt;
    }
  }
  if (!r.done()) {
    why = "trailing bytes after the view";
    return std::nullopt;
  }
  return v;
}

}  // namespace vc

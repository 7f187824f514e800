// An immutable list of kept row positions, shared by the heads of a compressed view
// that keep the same rows (a quantizer keeps every position of every head: one array
// for the whole view instead of one per layer and KV head).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace vc {

class PositionList {
 public:
  PositionList() = default;
  /// The values `v`, sharing `like`'s array when it holds the same values.
  explicit PositionList(std::vector<int32_t> v, const PositionList* like = nullptr) {
    if (v.empty()) return;
    if (like != nullptr && like->p_ && *like->p_ == v) {
      p_ = like->p_;
    } else {
      p_ = std::make_shared<const std::vector<int32_t>>(std::move(v));
    }
  }

  [[nodiscard]] size_t size() const { return p_ ? p_->size() : 0; }
  [[nodiscard]] bool empty() const { return size() == 0; }
  [[nodiscard]] const int32_t* data() const { return p_ ? p_->data() : nullptr; }
  [[nodiscard]] const int32_t* begin() const { return data(); }
  [[nodiscard]] const int32_t* end() const { return p_ ? p_->data() + p_->size() : nullptr; }
  [[nodiscard]] int32_t operator[](size_t i) const { return (*p_)[i]; }
  [[nodiscard]] const std::vector<int32_t>& values() const {
    static const std::vector<int32_t> kNone;
    return p_ ? *p_ : kNone;
  }
  /// True when both hold one array (not merely equal values).
  [[nodiscard]] bool shares(const PositionList& other) const { return p_ && p_ == other.p_; }

 private:
  std::shared_ptr<const std::vector<int32_t>> p_;
};

}  // namespace vc

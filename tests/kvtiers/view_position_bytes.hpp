// The bytes a compressed view holds for its kept positions: one int32 per kept row,
// except that a head keeping the same rows as the head before it (layer by layer,
// KV head by KV head) shares that head's list.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvtiers/compressed_tier.hpp"

namespace vc::test {

inline size_t view_position_bytes(const CompressedView& view) {
  size_t bytes = 0, prev_n = 0;
  const int32_t* prev = nullptr;
  for (size_t l = 0; l < view.layers(); ++l)
    for (size_t g = 0; g < view.kv_heads(); ++g) {
      const size_t n = view.count(l, g);
      const int32_t* p = view.positions(l, g);
      const bool same = prev != nullptr && n == prev_n && n > 0 && std::equal(p, p + n, prev);
      if (!same) bytes += n * sizeof(int32_t);
      prev = p, prev_n = n;
    }
  return bytes;
}

}  // namespace vc::test

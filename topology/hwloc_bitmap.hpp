// Small helpers over hwloc bitmaps shared by the binding code: an owning bitmap,
// its set indexes, and a comma list of indexes for reports.
#pragma once
#include <string>
#include <vector>

#include <hwloc.h>

namespace vc {

/// An hwloc bitmap freed on destruction.
struct HwlocBitmap {
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  HwlocBitmap() = default;
  /// The bitmap of `indexes` (PU or NUMA OS indexes).
  explicit HwlocBitmap(const std::vector<unsigned>& indexes) {
    for (unsigned i : indexes) hwloc_bitmap_set(b, i);
  }
  ~HwlocBitmap() { hwloc_bitmap_free(b); }
  HwlocBitmap(const HwlocBitmap&) = delete;
  HwlocBitmap& operator=(const HwlocBitmap&) = delete;
};

/// The indexes set in `b`, ascending.
inline std::vector<unsigned> bitmap_indexes(hwloc_const_bitmap_t b) {
  std::vector<unsigned> out;
  int i = -1;
  while ((i = hwloc_bitmap_next(b, i)) >= 0) out.push_back(unsigned(i));
  return out;
}

/// "0,1,8": the indexes as written in binding reports.
inline std::string index_list(const std::vector<unsigned>& v) {
  std::string s;
  for (unsigned x : v) {
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(x));
  }
  return s;
}

}  // namespace vc

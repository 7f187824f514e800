// The fast-memory budget: every byte of KV that sits in fast memory (GPU HBM; RAM on
// a CPU-only machine) is charged to one FastMemory: paged blocks (draft tails, the
// KV of full-mode requests, prompt blocks during a full-mode prefill), compressed
// views and the staging buffers of verify and prefill passes. A charge that would
// pass the capacity fails with an error naming the sizes; admission (the scheduler)
// reserves what a request can grow to before it starts, so an admitted request's
// charges fit.
#pragma once
#include <cstddef>
#include <mutex>
#include <string>

#include "kvtiers/tier_stats.hpp"  // format_bytes

namespace vc {

class FastMemory {
 public:
  /// capacity_bytes 0: unlimited (charges are only counted).
  explicit FastMemory(size_t capacity_bytes = 0) : capacity_(capacity_bytes) {}
  FastMemory(const FastMemory&) = delete;
  FastMemory& operator=(const FastMemory&) = delete;

  /// Charges `bytes` for `what`; throws vc::Error naming what, the bytes, the use
  /// and the capacity when they do not fit.
  void charge(size_t bytes, const std::string& what);
  /// Charges `bytes` when they fit; false otherwise (nothing charged).
  [[nodiscard]] bool try_charge(size_t bytes);
  /// Returns `bytes` charged earlier.
  void release(size_t bytes);

  [[nodiscard]] size_t capacity() const { return capacity_; }
  [[nodiscard]] bool limited() const { return capacity_ > 0; }
  [[nodiscard]] size_t used() const;
  /// The most ever charged at once (since construction or reset_peak()).
  [[nodiscard]] size_t peak() const;
  void reset_peak();

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  size_t used_ = 0, peak_ = 0;
};

/// A charge held by one owner (a view, a staging buffer), returned when it is
/// destroyed or reset. Movable.
class FastCharge {
 public:
  FastCharge() = default;
  FastCharge(FastMemory* mem, size_t bytes, const std::string& what);
  FastCharge(FastCharge&& o) noexcept;
  FastCharge& operator=(FastCharge&& o) noexcept;
  ~FastCharge() { reset(); }
  /// Changes the charge to `bytes` (charging the growth, returning the shrink).
  void resize(size_t bytes, const std::string& what);
  void reset();
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  FastMemory* mem_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace vc

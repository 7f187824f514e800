// Fast-memory accounting (see the header).
#include "kvtiers/fast_memory.hpp"

#include <algorithm>
#include <utility>

#include "kernels/error.hpp"

namespace vc {

void FastMemory::charge(size_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ > 0 && used_ + bytes > capacity_)
    throw Error("fast memory budget exhausted: " + what + " needs " + format_bytes(bytes) +
                ", " + format_bytes(used_) + " of " + format_bytes(capacity_) + " are in use");
  used_ += bytes;
  peak_ = std::max(peak_, used_);
}

bool FastMemory::try_charge(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ > 0 && used_ + bytes > capacity_) return false;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return true;
}

void FastMemory::release(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= std::min(bytes, used_);
}

size_t FastMemory::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

size_t FastMemory::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void FastMemory::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = used_;
}

FastCharge::FastCharge(FastMemory* mem, size_t bytes, const std::string& what) : mem_(mem) {
  if (mem_ != nullptr) mem_->charge(bytes, what);
  bytes_ = bytes;
}

FastCharge::FastCharge(FastCharge&& o) noexcept
    : mem_(std::exchange(o.mem_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

FastCharge& FastCharge::operator=(FastCharge&& o) noexcept {
  if (this != &o) {
    reset();
    mem_ = std::exchange(o.mem_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void FastCharge::resize(size_t bytes, const std::string& what) {
  if (mem_ != nullptr) {
    if (bytes > bytes_) mem_->charge(bytes - bytes_, what);
    else mem_->release(bytes_ - bytes);
  }
  bytes_ = bytes;
}

void FastCharge::reset() {
  if (mem_ != nullptr && bytes_ > 0) mem_->release(bytes_);
  bytes_ = 0;
}

}  // namespace vc

// Reference-counted block allocator.
#include "kvtiers/block_pool.hpp"

#include <string>

#include "kernels/error.hpp"

namespace vc {

BlockPool::BlockPool(size_t capacity) : refcount_(capacity, 0) {
  free_.reserve(capacity);
  for (size_t i = capacity; i-- > 0;) free_.push_back(int32_t(i));
}

int32_t BlockPool::allocate() {
  if (free_.empty())
    throw Error("KV block pool exhausted: all " + std::to_string(capacity()) +
                " blocks are in use (raise the KV capacity or lower the context)");
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[size_t(b)] = 1;
  return b;
}

void BlockPool::check_held(int32_t block, const char* op) const {
  if (block < 0 || size_t(block) >= capacity() || refcount_[size_t(block)] <= 0)
    throw Error(std::string("BlockPool::") + op + ": block " + std::to_string(block) +
                " is not held");
}

void BlockPool::retain(int32_t block) {
  check_held(block, "retain");
  ++refcount_[size_t(block)];
}

void BlockPool::release(int32_t block) {
  check_held(block, "release");
  if (--refcount_[size_t(block)] == 0) free_.push_back(block);
}

int BlockPool::refcount(int32_t block) const {
  if (block < 0 || size_t(block) >= capacity()) return 0;
  return refcount_[size_t(block)];
}

}  // namespace vc

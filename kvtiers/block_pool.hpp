// Fixed-size KV blocks handed out by id, with reference counts so that requests
// sharing a prompt prefix can share its blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vc {

/// Owns block ids [0, capacity). Invariants: a block is either free (refcount 0, in
/// the free list) or held (refcount >= 1, not in the free list).
class BlockPool {
 public:
  explicit BlockPool(size_t capacity);

  /// A free block with refcount 1; throws vc::Error when none is left.
  [[nodiscard]] int32_t allocate();
  /// One more holder of a held block (prefix sharing).
  void retain(int32_t block);
  /// One holder fewer; the block is free again at refcount 0.
  void release(int32_t block);

  [[nodiscard]] size_t capacity() const { return refcount_.size(); }
  [[nodiscard]] size_t free_blocks() const { return free_.size(); }
  [[nodiscard]] size_t used_blocks() const { return capacity() - free_blocks(); }
  [[nodiscard]] int refcount(int32_t block) const;

 private:
  void check_held(int32_t block, const char* op) const;
  std::vector<int32_t> free_;      // LIFO: recently freed blocks are reused first
  std::vector<int32_t> refcount_;  // [capacity]
};

}  // namespace vc

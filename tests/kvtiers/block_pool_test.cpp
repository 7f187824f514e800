// Block pool: allocation, sharing by reference count, release, exhaustion.
#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "kvtiers/block_pool.hpp"

namespace vc {
namespace {

TEST(block_pool, a_shared_block_is_freed_only_when_its_last_holder_releases_it) {
  BlockPool p(4);
  const int32_t b = p.allocate();
  p.retain(b);
  EXPECT_EQ(p.refcount(b), 2);
  p.release(b);
  EXPECT_EQ(p.free_blocks(), 3u);
  p.release(b);
  EXPECT_EQ(p.free_blocks(), 4u);
  EXPECT_EQ(p.refcount(b), 0);
}

TEST(block_pool, exhaustion_is_a_clear_error) {
  BlockPool p(2);
  (void)p.allocate();
  (void)p.allocate();
  try {
    (void)p.allocate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exhausted"), std::string::npos);
  }
}

TEST(block_pool, releasing_a_free_block_is_an_error) {
  BlockPool p(2);
  const int32_t b = p.allocate();
  p.release(b);
  EXPECT_THROW(p.release(b), Error);
  EXPECT_THROW(p.retain(7), Error);
}

}  // namespace
}  // namespace vc

// Requests that share a prompt prefix share its KV blocks (reference-counted), and
// nothing they compute changes by a single bit.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

// Blocks of 16 positions (the default is 64), so that short prompts span several
// blocks and the sharing arithmetic below stays small.
constexpr size_t kBlock = 16;

std::vector<int32_t> with_suffix(std::vector<int32_t> base, std::mt19937& rng, size_t n) {
  const auto extra = test::random_tokens(rng, n + 1, 2048, -1);
  base.insert(base.end(), extra.begin() + 1, extra.end());
  return base;
}

TEST(prefix_sharing, a_second_prompt_with_the_same_prefix_reuses_its_blocks_bit_for_bit) {
  std::mt19937 rng(3);
  const auto model = test::tinycode();
  const auto prefix = test::random_tokens(rng, 100, 2048, 2046);
  const auto a = with_suffix(prefix, rng, 30);
  const auto b = with_suffix(prefix, rng, 45);

  KvCacheConfig shared_cfg = model->kv_config(1024, DType::bf16, kBlock);
  KvCacheConfig plain_cfg = shared_cfg;
  plain_cfg.prefix_sharing = false;
  PagedKvCache shared(shared_cfg), plain(plain_cfg);
  Workspace ws(2);

  KvSequence sa, sb, pb;
  (void)prefill(*model, a, sa, shared, ws);
  const size_t used_a = shared.pool().used_blocks();
  const auto lb = prefill(*model, b, sb, shared, ws);
  const auto ref = prefill(*model, b, pb, plain, ws);
  // 100 shared tokens = 6 whole blocks of 16.
  EXPECT_EQ(shared.pool().used_blocks(), used_a + pb.blocks.size() - 6);
  for (size_t j = 0; j < 6; ++j) EXPECT_EQ(sa.blocks[j], sb.blocks[j]);
  EXPECT_EQ(shared.pool().refcount(sa.blocks[0]), 2);
  ASSERT_EQ(lb.size(), ref.size());
  EXPECT_EQ(0, std::memcmp(lb.data(), ref.data(), lb.size() * sizeof(float)));

  // The first request leaves: the second keeps its KV, bit for bit.
  shared.free(sa);
  const size_t n = size_t(model->config().num_kv_heads * model->config().head_dim);
  std::vector<float> k1(n), v1(n), k2(n), v2(n);
  for (size_t l = 0; l < size_t(model->config().num_layers); ++l)
    for (size_t p = 0; p < b.size(); ++p) {
      shared.read(l, sb, p, k1.data(), v1.data());
      plain.read(l, pb, p, k2.data(), v2.data());
      ASSERT_EQ(k1, k2) << "layer " << l << " position " << p;
      ASSERT_EQ(v1, v2);
    }
  shared.free(sb);
  EXPECT_EQ(shared.pool().used_blocks(), 0u);
  EXPECT_EQ(shared.published_blocks(), 0u) << "freed blocks leave the prefix index";
}

TEST(prefix_sharing, only_identical_tokens_at_identical_positions_are_shared) {
  std::mt19937 rng(4);
  const auto model = test::tinycode();
  PagedKvCache cache(model->kv_config(1024, DType::bf16, kBlock));
  Workspace ws(1);
  const auto a = test::random_tokens(rng, 64, 2048, 2046);
  auto b = a;
  b[20] = (b[20] + 1) % 2000;  // differs inside block 1
  KvSequence sa, sb;
  (void)prefill(*model, a, sa, cache, ws);
  (void)prefill(*model, b, sb, cache, ws);
  EXPECT_EQ(sa.blocks[0], sb.blocks[0]);
  EXPECT_NE(sa.blocks[1], sb.blocks[1]);
  EXPECT_NE(sa.blocks[2], sb.blocks[2]) << "a later block never matches after a difference";
  cache.free(sa);
  cache.free(sb);
}

TEST(prefix_sharing, a_prompt_identical_to_a_live_one_still_computes_its_last_position) {
  std::mt19937 rng(5);
  const auto model = test::tinycode();
  PagedKvCache cache(model->kv_config(1024, DType::bf16, kBlock));
  Workspace ws(1);
  const auto a = test::random_tokens(rng, 64, 2048, 2046);  // exactly 4 blocks
  KvSequence sa, sb;
  const auto la = prefill(*model, a, sa, cache, ws);
  const auto lb = prefill(*model, a, sb, cache, ws);
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
  EXPECT_EQ(sb.blocks[0], sa.blocks[0]);
  EXPECT_NE(sb.blocks[3], sa.blocks[3]) << "the block with the last position is recomputed";
  cache.free(sa);
  cache.free(sb);
}

}  // namespace
}  // namespace vc

// kernels/cuda/kv_store.cuh: rows' K and V stored into a paged layout on the GPU hold
// the bits PagedKvCache::write stores on the host (the same places, the same
// rounding), for bf16, f16 and f32 KV; a row marked -1 is skipped. Skipped without
// a device.
#include "kernels/cuda/kv_store.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc {
namespace {

TEST(cuda_kv_store, stores_rows_as_the_host_cache_writes_them_bit_for_bit) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  for (const DType dt : {DType::bf16, DType::f16, DType::f32}) {
    KvCacheConfig c;
    c.num_layers = 1, c.kv_heads = 2, c.head_dim = 64, c.block_tokens = 16, c.num_blocks = 8, c.dtype = dt;
    PagedKvCache cache(c);
    KvSequence a, b;
    cache.reserve(a, 40);
    cache.reserve(b, 20);
    const size_t row = c.kv_heads * c.head_dim;
    // Rows of two sequences at scattered positions, one of them not stored (-1).
    const std::vector<std::pair<KvSequence*, size_t>> at = {{&a, 0}, {&a, 17}, {&b, 19}, {&a, 39}, {&b, 3}};
    const auto k = cuda::test::random_floats(rng, at.size() * row, -3.f, 3.f);
    const auto v = cuda::test::random_floats(rng, at.size() * row, -3.f, 3.f);
    std::vector<int32_t> blocks, offsets;
    for (size_t m = 0; m < at.size(); ++m) {
      blocks.push_back(m == 4 ? -1 : at[m].first->blocks[at[m].second / c.block_tokens]);
      offsets.push_back(int32_t(at[m].second % c.block_tokens));
      if (m != 4) cache.write(0, *at[m].first, at[m].second, k.data() + m * row, v.data() + m * row);
    }
    KvSequence none;
    const cpu::PagedKv host = cache.view(0, none);
    const size_t bytes = c.num_blocks * c.kv_heads * c.block_tokens * c.head_dim * dtype_size(dt);
    // The device layout starts as the host's (the writes are all that differ).
    std::vector<uint8_t> start_k(bytes, 0), start_v(bytes, 0);
    std::memcpy(start_k.data(), host.k, bytes);
    std::memcpy(start_v.data(), host.v, bytes);
    for (size_t m = 0; m < 4; ++m) {  // undo the stored rows in the start image
      for (size_t h = 0; h < c.kv_heads; ++h) {
        const size_t off = ((size_t(blocks[m]) * c.kv_heads + h) * c.block_tokens + size_t(offsets[m])) *
                           c.head_dim * dtype_size(dt);
        std::memset(start_k.data() + off, 0x55, c.head_dim * dtype_size(dt));
        std::memset(start_v.data() + off, 0x55, c.head_dim * dtype_size(dt));
      }
    }
    cuda::test::DeviceBuffer<uint8_t> dk(start_k), dv(start_v);
    cuda::test::DeviceBuffer<float> rk(k), rv(v);
    cuda::test::DeviceBuffer<int32_t> db(blocks), doff(offsets);
    ASSERT_EQ(cuda::launch_kv_store(rk.get(), rv.get(), at.size(), db.get(), doff.get(), c.kv_heads,
                                    c.block_tokens, c.head_dim, dt, dk.get(), dv.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got_k = dk.download(), got_v = dv.download();
    EXPECT_EQ(0, std::memcmp(got_k.data(), host.k, bytes)) << dtype_name(dt);
    EXPECT_EQ(0, std::memcmp(got_v.data(), host.v, bytes)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace vc

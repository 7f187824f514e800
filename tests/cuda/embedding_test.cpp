// Tests of the CUDA embedding gather against the CPU forward's gather (vc::to_f32 of
// one table row per token). Skipped where no CUDA device is usable.
#include "kernels/cuda/embedding.cuh"

#include <cstdint>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

TEST(cuda_embedding, gathers_the_same_bits_as_the_cpu_for_every_table_type) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(41);
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    for (size_t dim : {1u, 7u, 64u, 300u, 4096u}) {
      const size_t vocab = 97, M = 13;
      const auto table = test::random_typed(rng, vocab * dim, dt, -3.f, 3.f);
      std::vector<int32_t> ids(M);
      for (auto& id : ids) id = int32_t(rng() % vocab);
      ids[0] = 0;
      ids[1] = int32_t(vocab - 1);
      std::vector<float> ref(M * dim);
      for (size_t m = 0; m < M; ++m)
        to_f32(dt, table.data() + size_t(ids[m]) * dim * dtype_size(dt), ref.data() + m * dim, dim);

      DeviceBuffer<uint8_t> dtab(table);
      DeviceBuffer<int32_t> dids(ids);
      DeviceBuffer<float> dout(M * dim);
      DeviceBuffer<int> dbad(std::vector<int>{0});
      CUDA_CHECK(launch_embedding(dids.get(), M, dtab.get(), dt, vocab, dim, dout.get(), dbad.get(),
                                  nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(test::same_bits(dout.download(), ref))
          << "dtype=" << dtype_name(dt) << " dim=" << dim;
      EXPECT_EQ(dbad.download()[0], 0);
    }
  }
}

TEST(cuda_embedding, writes_zeros_and_counts_ids_outside_the_vocabulary) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(42);
  const size_t vocab = 10, dim = 33;
  const auto table = test::random_typed(rng, vocab * dim, DType::bf16, -1.f, 1.f);
  const std::vector<int32_t> ids = {3, -1, 10, 9};
  DeviceBuffer<uint8_t> dtab(table);
  DeviceBuffer<int32_t> dids(ids);
  DeviceBuffer<float> dout(ids.size() * dim);
  DeviceBuffer<int> dbad(std::vector<int>{0});
  CUDA_CHECK(launch_embedding(dids.get(), ids.size(), dtab.get(), DType::bf16, vocab, dim,
                              dout.get(), dbad.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = dout.download();
  for (size_t i = 0; i < dim; ++i) {
    EXPECT_EQ(out[1 * dim + i], 0.f) << "id -1, element " << i;
    EXPECT_EQ(out[2 * dim + i], 0.f) << "id 10, element " << i;
    EXPECT_EQ(out[0 * dim + i],
              bf16_to_f32(uint16_t(table[(3 * dim + i) * 2] | table[(3 * dim + i) * 2 + 1] << 8)));
  }
  EXPECT_EQ(dbad.download()[0], 2);
  EXPECT_EQ(
      launch_embedding(nullptr, 0, nullptr, DType::bf16, vocab, dim, nullptr, nullptr, nullptr),
      cudaSuccess);
}

}  // namespace
}  // namespace vc::cuda

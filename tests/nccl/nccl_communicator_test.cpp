// The NCCL communicator of tensor parallelism: GPU ranks of one process must give
// the CPU ranks' bits (rank-order sums), so tensor-parallel output does not depend on
// which communicator runs it. Needs 2+ GPUs; skips otherwise.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "kernels/error.hpp"
#include "runtime/nccl/nccl_communicator.hpp"
#include "runtime/tp_generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

#define REQUIRE_GPUS(n)                                                                    \
  do {                                                                                     \
    const int have = NcclCommunicator::device_count();                                     \
    if (have < (n))                                                                        \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices for NCCL ranks, this machine has " \
                   << have;                                                                \
  } while (0)

TEST(nccl_communicator, all_reduce_gives_the_cpu_communicators_rank_order_bits) {
  REQUIRE_GPUS(2);
  const int d = std::min(NcclCommunicator::device_count(), 4);
  std::vector<int> devices(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) devices[size_t(i)] = i;
  NcclCommunicator nccl(devices);
  CpuCommunicator cpu(d);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1e4f);
  const size_t n = 4097;
  std::vector<std::vector<float>> parts(static_cast<size_t>(d), std::vector<float>(n));
  for (auto& p : parts)
    for (auto& x : p) x = nd(rng);
  auto a = parts, b = parts;
  std::vector<std::thread> ts;
  for (int r = 0; r < d; ++r)
    ts.emplace_back([&, r] {
      nccl.all_reduce_sum(r, a[size_t(r)].data(), n);
      cpu.all_reduce_sum(r, b[size_t(r)].data(), n);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < d; ++r)
    EXPECT_EQ(0, std::memcmp(a[size_t(r)].data(), b[0].data(), n * sizeof(float))) << "rank " << r;
}

TEST(nccl_communicator, tensor_parallel_generation_over_gpus_equals_the_cpu_ranks_bit_for_bit) {
  REQUIRE_GPUS(2);
  GeneratorConfig gc;
  gc.max_context = 1024;
  TpGenerator over_nccl(test::tinycode(), test::tinycode_tokenizer(),
                        std::make_shared<NcclCommunicator>(std::vector<int>{0, 1}), gc);
  TpGenerator over_cpu(test::tinycode(), test::tinycode_tokenizer(), 2, gc);
  std::mt19937 rng(9);
  const ModelConfig& c = test::tinycode()->config();
  const auto prompt = test::random_tokens(rng, 120, c.vocab_size, c.bos_token_id);
  GenerateOptions o;
  o.mode = DecodeMode::vericache;
  o.max_tokens = 24;
  o.stop_at_eos = false;
  o.draft_length = 6;
  const auto a = over_nccl.generate(prompt, o), b = over_cpu.generate(prompt, o);
  ASSERT_EQ(a.output_ids, b.output_ids);
  EXPECT_EQ(0, std::memcmp(a.output_logprobs.data(), b.output_logprobs.data(),
                           a.output_logprobs.size() * sizeof(float)));
}

TEST(nccl_communicator, a_device_that_does_not_exist_is_named) {
  const int have = NcclCommunicator::device_count();
  try {
    NcclCommunicator bad({have});
    ADD_FAILURE() << "no error for device " << have;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(have) + " does not exist"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace vc

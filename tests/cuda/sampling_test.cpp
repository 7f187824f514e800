// Tests of the CUDA token choice against runtime/sampler.cpp (vc::sample_token and
// vc::token_logprob, compiled into this test): the same token for greedy and seeded
// Gumbel-max rows, the same noise for the same (seed, position), log-probabilities
// within a last-bit difference. Skipped where no CUDA device is usable.
#include "kernels/cuda/sampling.cuh"

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "runtime/sampler.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

struct RowParams {
  float temperature;
  uint64_t seed;
  int64_t position;
};

void expect_matches_cpu(const std::vector<float>& logits, size_t vocab,
                        const std::vector<RowParams>& rows) {
  const size_t M = rows.size();
  std::vector<float> temp(M);
  std::vector<uint64_t> seed(M);
  std::vector<int64_t> pos(M);
  for (size_t m = 0; m < M; ++m) {
    temp[m] = rows[m].temperature;
    seed[m] = rows[m].seed;
    pos[m] = rows[m].position;
  }
  DeviceBuffer<float> dl(logits), dt(temp), dlp(M);
  DeviceBuffer<uint64_t> ds(seed);
  DeviceBuffer<int64_t> dp(pos);
  DeviceBuffer<int32_t> dtok(M);
  CUDA_CHECK(launch_sample_rows(dl.get(), M, vocab, dt.get(), ds.get(), dp.get(), dtok.get(),
                                dlp.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto tokens = dtok.download();
  const auto lps = dlp.download();
  for (size_t m = 0; m < M; ++m) {
    const std::span<const float> row(logits.data() + m * vocab, vocab);
    SamplingParams p;
    p.temperature = rows[m].temperature;
    p.seed = rows[m].seed;
    const int32_t want = sample_token(row, p, rows[m].position);
    ASSERT_EQ(tokens[m], want) << "row " << m << " T=" << p.temperature << " seed=" << p.seed
                               << " position=" << rows[m].position << " vocab=" << vocab;
    const float lp = token_logprob(row, want);
    EXPECT_NEAR(lps[m], lp, 1e-6 + 1e-6 * std::fabs(lp)) << "row " << m;
  }
}

TEST(cuda_sampling, picks_the_cpu_samplers_token_for_greedy_and_seeded_rows) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(101);
  for (size_t vocab : {1u, 2u, 255u, 32000u, 128256u}) {
    std::vector<RowParams> rows;
    for (float t : {0.f, 0.7f, 1.f, 1.5f})
      for (uint64_t s : {0ull, 42ull, 0xdeadbeefcafeull})
        rows.push_back({t, s, int64_t(rng() % 100000)});
    const auto logits = test::random_floats(rng, rows.size() * vocab, -8.f, 8.f);
    expect_matches_cpu(logits, vocab, rows);
  }
}

TEST(cuda_sampling, breaks_greedy_ties_toward_the_lower_token_id) {
  VC_REQUIRE_CUDA_DEVICE();
  const size_t vocab = 5000;
  std::vector<float> logits(vocab, 0.f);
  logits[4000] = 3.f;
  logits[1234] = 3.f;
  logits[4999] = 3.f;
  expect_matches_cpu(logits, vocab, {{0.f, 0, 10}});
}

TEST(cuda_sampling, draws_the_same_token_for_the_same_seed_and_position_whatever_the_batch) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(102);
  const size_t vocab = 32000, M = 9;
  const auto one = test::random_floats(rng, vocab, -4.f, 4.f);
  std::vector<float> logits;
  for (size_t m = 0; m < M; ++m) logits.insert(logits.end(), one.begin(), one.end());
  // Rows 0, 4 and 8 share (seed, position): they must draw alike; the CPU decides all.
  std::vector<RowParams> rows;
  for (size_t m = 0; m < M; ++m)
    rows.push_back({1.f, m % 4 == 0 ? 7ull : uint64_t(m), m % 4 == 0 ? 500 : int64_t(m)});
  expect_matches_cpu(logits, vocab, rows);
}

}  // namespace
}  // namespace vc::cuda

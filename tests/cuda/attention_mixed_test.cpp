// Tests of the CUDA drafter attention against vc::cpu::attention_row_mixed: each row
// with its own compressed prefix per KV head (kept rows, counts that differ by head,
// an empty one) and its own paged tail. Skipped where no CUDA device is usable.
#include "kernels/cpu/attention_mixed.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_mixed.cuh"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

struct RowCase {
  std::vector<int32_t> counts;  // kept prefix rows per KV head
  int32_t tail_begin, n_ctx;
};

TEST(cuda_attention_mixed, matches_the_cpu_drafter_attention_over_prefix_rows_and_paged_tail) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(111);
  const size_t n_heads = 8, kvh = 2, D = 128, bt = 16, blocks = 80;
  const DType dt = DType::bf16;
  const std::vector<RowCase> cases = {
      {{50, 300}, 64, 64 + 40}, {{0, 17}, 32, 33}, {{600, 255}, 1000, 1016}, {{1, 1}, 16, 16}};
  const size_t M = cases.size(), stride = blocks, qd = n_heads * D;

  const auto kpool = test::random_typed(rng, blocks * kvh * bt * D, dt, -1.f, 1.f);
  const auto vpool = test::random_typed(rng, blocks * kvh * bt * D, dt, -1.f, 1.f);
  std::vector<int32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const auto q = test::random_floats(rng, M * qd, -1.f, 1.f);
  const float scale = 0.0883883f;

  std::vector<std::vector<uint8_t>> pk, pv;  // [m * kvh + g]
  std::vector<int32_t> counts, tail_begin, n_ctx, tables;
  size_t max_entries = 0;
  for (const RowCase& rc : cases) {
    for (size_t g = 0; g < kvh; ++g) {
      pk.push_back(test::random_typed(rng, size_t(rc.counts[g]) * D, dt, -1.f, 1.f));
      pv.push_back(test::random_typed(rng, size_t(rc.counts[g]) * D, dt, -1.f, 1.f));
      counts.push_back(rc.counts[g]);
      max_entries = std::max(max_entries, size_t(rc.counts[g] + rc.n_ctx - rc.tail_begin));
    }
    tail_begin.push_back(rc.tail_begin);
    n_ctx.push_back(rc.n_ctx);
    tables.insert(tables.end(), order.begin(), order.end());
  }

  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> dpk, dpv;
  std::vector<const void*> kptr, vptr;
  for (size_t i = 0; i < pk.size(); ++i) {
    dpk.push_back(std::make_unique<DeviceBuffer<uint8_t>>(std::max<size_t>(pk[i].size(), 1)));
    dpv.push_back(std::make_unique<DeviceBuffer<uint8_t>>(std::max<size_t>(pv[i].size(), 1)));
    if (!pk[i].empty()) dpk.back()->upload(pk[i]), dpv.back()->upload(pv[i]);
    kptr.push_back(dpk.back()->get());
    vptr.push_back(dpv.back()->get());
  }
  DeviceBuffer<const void*> dkptr(kptr), dvptr(vptr);
  DeviceBuffer<int32_t> dcounts(counts), dbegin(tail_begin), dctx(n_ctx), dtables(tables);
  DeviceBuffer<uint8_t> dk(kpool), dv(vpool);
  DeviceBuffer<float> dq(q), dout(M * qd);
  MixedKvRows kv;
  kv.prefix_k = dkptr.get();
  kv.prefix_v = dvptr.get();
  kv.prefix_count = dcounts.get();
  kv.k = dk.get();
  kv.v = dv.get();
  kv.dtype = dt;
  kv.block_tokens = bt;
  kv.kv_heads = kvh;
  kv.head_dim = D;
  kv.block_tables = dtables.get();
  kv.table_stride = stride;
  kv.tail_begin = dbegin.get();
  kv.n_ctx = dctx.get();
  kv.max_entries = max_entries;
  const size_t ws = attention_mixed_workspace_floats(M, n_heads, D, max_entries);
  DeviceBuffer<float> dws(ws);
  CUDA_CHECK(launch_attention_rows_mixed(dq.get(), M, n_heads, kv, scale, dout.get(), dws.get(), ws,
                                         nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = dout.download();

  for (size_t m = 0; m < M; ++m) {
    std::vector<std::vector<float>> fk(kvh), fv(kvh);
    std::vector<cpu::DenseKvHead> prefix(kvh);
    for (size_t g = 0; g < kvh; ++g) {
      const size_t n = size_t(cases[m].counts[g]);
      fk[g].resize(n * D);
      fv[g].resize(n * D);
      to_f32(dt, pk[m * kvh + g].data(), fk[g].data(), n * D);
      to_f32(dt, pv[m * kvh + g].data(), fv[g].data(), n * D);
      prefix[g] = {fk[g].data(), fv[g].data(), n};
    }
    const cpu::PagedKv tail{kpool.data(), vpool.data(), dt, bt, kvh, D, order.data()};
    std::vector<float> ref(qd);
    cpu::attention_row_mixed(q.data() + m * qd, n_heads, prefix.data(), tail,
                             size_t(cases[m].tail_begin), size_t(cases[m].n_ctx), scale,
                             ref.data());
    for (size_t i = 0; i < qd; ++i)
      ASSERT_NEAR(got[m * qd + i], ref[i], 2e-5 + 2e-5 * std::fabs(ref[i]))
          << "row " << m << " i=" << i;
  }
}

}  // namespace
}  // namespace vc::cuda
